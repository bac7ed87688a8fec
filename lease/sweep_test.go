package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

// countingSweeper records its calls, and can hold one until told.
type countingSweeper struct {
	calls atomic.Int32
	hold  chan struct{} // if not nil, each call waits for a value
}

func (s *countingSweeper) Sweep(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
	s.calls.Add(1)
	if s.hold != nil {
		select {
		case <-s.hold:
		case <-ctx.Done():
			return lease.SweepPage{}, ctx.Err()
		}
	}
	return lease.SweepPage{Removed: []string{"x"}}, nil
}

func TestSweepRunsBackendAndSweepersUnderItsLease(t *testing.T) {
	ctx := context.Background()
	clock := leasetest.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	store := memory.New(memory.Options{Clock: clock, Retention: time.Hour})
	extra := &countingSweeper{hold: make(chan struct{})}
	a, err := lease.NewClient(store, lease.ClientOptions{Owner: "a", Clock: clock, Sweepers: []lease.Sweeper{extra}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := lease.NewClient(store, lease.ClientOptions{Owner: "b", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h, err := b.TryAcquire(ctx, "job/1", p)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)

	done := make(chan error, 1)
	var n int
	go func() {
		var err error
		n, err = a.Sweep(ctx)
		done <- err
	}()
	for extra.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// a sweeps (held in extra): b must not sweep at the same time.
	if _, err := b.Sweep(ctx); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("Sweep while another client sweeps: %v, want ErrNotAcquired", err)
	}
	extra.hold <- struct{}{}
	if err := <-done; err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	// job/1's record, then the extra sweeper's one.
	if n != 2 {
		t.Fatalf("Sweep removed %d records, want 2 (job/1 and the extra sweeper's)", n)
	}
	if r, _ := store.Inspect(ctx, "job/1"); r.Token != 0 {
		t.Fatalf("Inspect(job/1) after the sweep = %+v, want no record", r)
	}
	if r, _ := store.Inspect(ctx, lease.SweepKey); r.Held {
		t.Fatalf("the sweep's lease is still held after Sweep returned: %+v", r)
	}
}

func TestSweepInTheBackground(t *testing.T) {
	ctx := context.Background()
	extra := &countingSweeper{}
	c, err := lease.NewClient(memory.New(memory.Options{}), lease.ClientOptions{Owner: "a", SweepEvery: 20 * time.Millisecond, Sweepers: []lease.Sweeper{extra}})
	if err != nil {
		t.Fatal(err)
	}
	off, err := lease.NewClient(memory.New(memory.Options{}), lease.ClientOptions{Owner: "a", SweepEvery: -1, Sweepers: []lease.Sweeper{extra}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	use := func(c *lease.Client) {
		h, err := c.TryAcquire(ctx, "k", p)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for extra.calls.Load() < 3 && time.Now().Before(deadline) {
		use(off)
		use(c)
		time.Sleep(5 * time.Millisecond)
	}
	if got := extra.calls.Load(); got < 3 {
		t.Fatalf("a client used for 5s with SweepEvery 20ms swept %d times, want at least 3", got)
	}
	// Let the last background sweep finish before goleak looks.
	for {
		if r, _ := c.Inspect(ctx, lease.SweepKey); !r.Held {
			break
		}
		time.Sleep(time.Millisecond)
	}
	before := extra.calls.Load()
	for range 20 {
		use(off)
	}
	time.Sleep(50 * time.Millisecond)
	if got := extra.calls.Load(); got != before {
		t.Fatalf("a client with SweepEvery -1 swept (%d calls, want %d)", got, before)
	}
}

// failingSweeper fails every call.
type failingSweeper struct{}

func (failingSweeper) Sweep(context.Context, lease.SweepOptions) (lease.SweepPage, error) {
	return lease.SweepPage{}, errors.New("NOPERM this user has no permissions to run the 'scan' command")
}

func TestSweepGoesOnPastAFailingSweeper(t *testing.T) {
	ctx := context.Background()
	after := &countingSweeper{}
	c, err := lease.NewClient(memory.New(memory.Options{}), lease.ClientOptions{Owner: "a", SweepEvery: -1,
		Sweepers: []lease.Sweeper{failingSweeper{}, after}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.Sweep(ctx)
	if err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("Sweep with a failing sweeper: %v, want its error", err)
	}
	if after.calls.Load() != 1 || n != 1 {
		t.Fatalf("the sweeper after a failing one ran %d times and Sweep removed %d; want 1 and 1", after.calls.Load(), n)
	}
}
