package leaseservice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseservice"
)

// TestFailedFunctionRunsAgainByDefault is the regression test of a
// singleton that returned an error once and was never run again while the
// process went on: with zero Options, the function is run again.
func TestFailedFunctionRunsAgainByDefault(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	again := make(chan struct{})
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- leaseservice.Run(ctx, client(t, mem, "svc"), "k", policy(t, time.Second),
			func(ctx context.Context, h *lease.Handle) error {
				if calls++; calls == 1 {
					return errors.New("boom")
				}
				close(again)
				<-ctx.Done()
				return nil
			}, leaseservice.Options{})
	}()
	select {
	case <-again:
	case err := <-done:
		t.Fatalf("Run returned %v after the first failure; the function was not run again", err)
	case <-time.After(time.Minute):
		t.Fatal("the function was not run again within a minute")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after ctx ended", err)
	}
}
