package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
)

// The allocation tests pin what the Client itself costs per operation, on
// the memory backend (which allocates nothing on these paths) and with no
// observer, so that a change that makes the common path dearer fails here
// rather than in a benchmark nobody reads. testing.AllocsPerRun counts
// allocations, not time: the load of the machine cannot move them.

// watching is the memory backend as a pipelining client sees it: each call
// asks for its context's Done channel and checks it, as valkey-go does for
// a request pipelined with others (at 64 goroutines, nearly every request).
type watching struct{ lease.Backend }

func watch(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
		return nil
	}
}

func (w watching) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	if err := watch(ctx); err != nil {
		return 0, err
	}
	return w.Backend.Acquire(ctx, r)
}

func (w watching) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	if err := watch(ctx); err != nil {
		return err
	}
	return w.Backend.Renew(ctx, a, ttl)
}

func (w watching) Release(ctx context.Context, a lease.Acquisition) error {
	if err := watch(ctx); err != nil {
		return err
	}
	return w.Backend.Release(ctx, a)
}

// stalling is a backend whose Acquire of stallKey waits inside the
// backend until release is closed, saying so on entered: a call in flight
// while others are measured.
type stalling struct {
	lease.Backend
	entered, release chan struct{}
}

const stallKey = "stall"

func (s stalling) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	if r.Key == stallKey {
		close(s.entered)
		<-s.release
	}
	return s.Backend.Acquire(ctx, r)
}

func TestAllocs(t *testing.T) {
	if race {
		t.Skip("allocation counts are not measured under the race detector; run go test without -race")
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second}) // OperationTimeout 3s
	if err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	cancellable, cancel := context.WithCancel(bg)
	defer cancel()
	soon, cancelSoon := context.WithTimeout(bg, time.Second)
	defer cancelSoon()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		watched bool // the backend asks for Done on every call
		// overlapped: another call of the client is in flight throughout,
		// as calls are at 64 goroutines
		overlapped bool
		op         func(context.Context, lease.Policy) func(*testing.T, *lease.Client)
		max        float64
	}{
		// The cycle allocates the Handle, which holds both calls' contexts.
		{"cycle", bg, false, false, cycle, 1},
		// A watched call adds its Done channel, but no timer: that comes
		// from a pool.
		{"cycle/watched", bg, true, false, cycle, 3},
		// A watched call that overlaps another, under a parent that cannot
		// end, shares its Done channel and timer with the calls that start
		// within the same millisecond (beginShared): it adds nothing.
		{"cycle/watched/overlapped", bg, true, true, cycle, 1},
		// Under a parent that can be cancelled, context.AfterFunc's own
		// two allocations per call come on top.
		{"cycle/watched/cancellable", cancellable, true, false, cycle, 7},
		// Under a parent whose deadline comes before OperationTimeout's,
		// the calls run under the parent itself.
		{"cycle/watched/deadline", soon, true, false, cycle, 1},
		// Renew makes one context (a renewal may follow another before
		// the backend dropped the last one's), plus its channel if watched.
		{"renew", bg, false, false, renew, 1},
		{"renew/watched", bg, true, false, renew, 2},
		{"renew/watched/cancellable", cancellable, true, false, renew, 4},
		// A cycle with managed renewal, stopped before its first renewal
		// is due (a work item): no goroutine and no renewal timer, only
		// the Handle, the Managed, its two channels, its context (two) and
		// the timer that would start the renewer (two: the timer and the
		// method value it calls). Twelve when a goroutine started at once.
		{"cycle/managed", bg, false, false, managedCycle, 8},
		// A refused TryAcquire: the Handle it would have returned, the
		// backend's *NotAcquiredError and the client's wrapping of it.
		{"refused", bg, false, false, refused, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b lease.Backend = leasememory.New(leasememory.Options{})
			if tc.watched {
				b = watching{b}
			}
			st := stalling{b, make(chan struct{}), make(chan struct{})}
			c, err := lease.NewClient(st, lease.ClientOptions{Owner: "allocs"})
			if err != nil {
				t.Fatal(err)
			}
			if tc.overlapped {
				done := make(chan struct{})
				go func() {
					defer close(done)
					_, _ = c.TryAcquire(bg, stallKey, p)
				}()
				<-st.entered
				defer func() { close(st.release); <-done }()
			}
			op := tc.op(tc.ctx, p)
			n := testing.AllocsPerRun(1000, func() { op(t, c) })
			t.Logf("%v allocations per run", n)
			if n > tc.max {
				t.Errorf("%v allocations per run, want at most %v", n, tc.max)
			}
		})
	}
}

func cycle(ctx context.Context, p lease.Policy) func(*testing.T, *lease.Client) {
	return func(t *testing.T, c *lease.Client) {
		h, err := c.TryAcquire(ctx, "k", p)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func managedCycle(ctx context.Context, p lease.Policy) func(*testing.T, *lease.Client) {
	return func(t *testing.T, c *lease.Client) {
		h, err := c.TryAcquire(ctx, "k", p)
		if err != nil {
			t.Fatal(err)
		}
		m, err := h.StartManaged(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func renew(ctx context.Context, p lease.Policy) func(*testing.T, *lease.Client) {
	var h *lease.Handle
	return func(t *testing.T, c *lease.Client) {
		if h == nil {
			var err error
			if h, err = c.TryAcquire(ctx, "k", p); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func refused(ctx context.Context, p lease.Policy) func(*testing.T, *lease.Client) {
	var held bool
	return func(t *testing.T, c *lease.Client) {
		if !held {
			if _, err := c.TryAcquire(ctx, "k", p); err != nil {
				t.Fatal(err)
			}
			held = true
		}
		if _, err := c.TryAcquire(ctx, "k", p); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held key = %v, want ErrNotAcquired", err)
		}
	}
}
