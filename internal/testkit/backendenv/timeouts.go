package backendenv

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/golib/lease/lease"
)

// CheckOverlappingTimeouts checks that acquires in flight at once on one
// lease.Client, under a context that can never end, each end when their
// OperationTimeout passes on a server that does not answer, so that no
// call waits on the server longer than its bound. pause stops the
// server (the caller resumes it). Each acquire must return within 5s of
// real time (a liveness bound, far above the 300ms timeout, and below the
// 10s after which valkey-go gives up on a connection by itself) with an
// error that is not a grant: unknown (lease.ErrIndeterminate) for a
// request that was sent, or the deadline for one that never left the
// client (a connection pool waiting for a free connection).
func CheckOverlappingTimeouts(t *testing.T, b lease.Backend, pause func()) {
	t.Helper()
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "overlapping"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second, OperationTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const calls = 8
	for i := range calls { // warm up: connections, prepared statements, scripts
		h, err := c.TryAcquire(context.Background(), "overlap-"+strconv.Itoa(i), p)
		if err != nil {
			t.Fatalf("warm-up acquire: %v", err)
		}
		if err := h.Release(context.Background()); err != nil {
			t.Fatalf("warm-up release: %v", err)
		}
	}
	pause()
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			_, err := c.TryAcquire(context.Background(), "overlap-"+strconv.Itoa(i), p)
			errs <- err
		}()
	}
	for range calls {
		select {
		case err := <-errs:
			if !errors.Is(err, lease.ErrIndeterminate) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("acquire on a server that does not answer = %v, want an unknown outcome or the deadline", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("an acquire on a server that does not answer never returned: its deadline did not end it")
		}
	}
}
