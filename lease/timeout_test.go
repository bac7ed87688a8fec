package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

// deadlines is a backend that records the deadline of each call's context,
// and whether the context had ended when the call began. With stall set,
// Acquire waits for its context to end and reports an unknown outcome.
type deadlines struct {
	lease.Backend
	stall bool

	mu    sync.Mutex
	calls []call
}

type call struct {
	op       string
	deadline time.Time
	bounded  bool
	err      error
}

func (d *deadlines) note(ctx context.Context, op string) {
	dl, ok := ctx.Deadline()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, call{op, dl, ok, ctx.Err()})
}

// last returns the last call of op.
func (d *deadlines) last(op string) call {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := len(d.calls) - 1; i >= 0; i-- {
		if d.calls[i].op == op {
			return d.calls[i]
		}
	}
	return call{}
}

func (d *deadlines) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	d.note(ctx, "acquire")
	if d.stall {
		<-ctx.Done()
		return 0, lease.Indeterminate(ctx.Err())
	}
	return d.Backend.Acquire(ctx, r)
}

func (d *deadlines) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	d.note(ctx, "renew")
	return d.Backend.Renew(ctx, a, ttl)
}

func (d *deadlines) Release(ctx context.Context, a lease.Acquisition) error {
	d.note(ctx, "release")
	return d.Backend.Release(ctx, a)
}

func (d *deadlines) Inspect(ctx context.Context, key string) (lease.Record, error) {
	d.note(ctx, "inspect")
	return d.Backend.Inspect(ctx, key)
}

// TestOperationTimeoutIsRealTime checks that every backend call of a Handle
// and of Acquire is bounded by OperationTimeout on real time, also when the
// client's clock is a fake one far from it, and by the caller's deadline
// when that comes first.
func TestOperationTimeoutIsRealTime(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))
	b := &deadlines{Backend: memory.New(memory.Options{Clock: clock})}
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "test", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 2 * time.Second
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, OperationTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	check := func(op string, do func(context.Context) error) {
		t.Helper()
		before := time.Now()
		if err := do(context.Background()); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		after := time.Now()
		got := b.last(op)
		if got.op != op || !got.bounded || got.deadline.Before(before.Add(timeout)) || got.deadline.After(after.Add(timeout)) {
			t.Errorf("%s ran with deadline %v (bounded %v), want %v from the real time of the call",
				op, got.deadline, got.bounded, timeout)
		}
		soon, cancel := context.WithTimeout(context.Background(), timeout/2)
		defer cancel()
		want, _ := soon.Deadline()
		if err := do(soon); err != nil {
			t.Fatalf("%s under a shorter deadline: %v", op, err)
		}
		if got := b.last(op); !got.deadline.Equal(want) {
			t.Errorf("%s under a shorter deadline: the backend ran with deadline %v, want the caller's %v", op, got.deadline, want)
		}
	}
	var h *lease.Handle
	check("acquire", func(ctx context.Context) (err error) {
		if h != nil {
			if err := h.Release(ctx); err != nil {
				return err
			}
		}
		h, err = c.TryAcquire(ctx, "k", p)
		return err
	})
	check("renew", func(ctx context.Context) error { return h.Renew(ctx) })
	check("inspect", func(ctx context.Context) error { return h.Validate(ctx) })
	check("release", func(ctx context.Context) error {
		if err := h.Release(ctx); err != nil {
			return err
		}
		h, err = c.TryAcquire(context.Background(), "k", p)
		return err
	})
}

// TestUnansweredAcquireReleasesDetached checks that an attempt cut off by
// OperationTimeout, or by the caller's context, reads as ErrIndeterminate,
// and that the release that cleans up after it runs under a live context,
// detached from the caller's, bounded by OperationTimeout.
func TestUnansweredAcquireReleasesDetached(t *testing.T) {
	b := &deadlines{Backend: memory.New(memory.Options{}), stall: true}
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 50 * time.Millisecond
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, OperationTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	for _, callerEnds := range []bool{false, true} {
		b.mu.Lock()
		b.calls = nil
		b.mu.Unlock()
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if callerEnds {
			ctx, cancel = context.WithTimeout(ctx, timeout/5)
		}
		before := time.Now()
		_, err = c.TryAcquire(ctx, "k", p)
		cancel()
		if !errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("callerEnds=%v: TryAcquire = %v, want ErrIndeterminate and DeadlineExceeded", callerEnds, err)
		}
		if d := time.Since(before); !callerEnds && d < timeout {
			t.Fatalf("the attempt ended after %v, before its OperationTimeout %v", d, timeout)
		}
		got := b.last("release")
		if got.op != "release" || got.err != nil || !got.bounded || got.deadline.After(time.Now().Add(timeout)) {
			t.Fatalf("callerEnds=%v: clean-up %s ran ended (%v), deadline %v (bounded %v); want a live release bounded by %v",
				callerEnds, got.op, got.err, got.deadline, got.bounded, timeout)
		}
	}
}
