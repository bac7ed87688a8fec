package lease

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"
)

// DefaultRetention is how long a store of this module keeps the record of
// a lease after the lease ended (released, expired or force-released),
// unless its options say otherwise.
//
// While the record is kept, Inspect and the leasectl command still show the
// key's last holder and token. Once it is gone, the next acquisition's token
// is still above every earlier one, because tokens are seeded from the
// store's clock (see Backend): a token issued more than the retention ago is
// below the clock now. So a retention of R also survives a backward step of
// the store's clock of up to R, where a record removed at once would not.
const DefaultRetention = 24 * time.Hour

// KeepForever is the retention that keeps the records of ended leases
// for good: nothing is ever removed, and tokens of a key rise even across
// any backward step of the store's clock that leaves its records in place.
// The price is one record per key ever used. Choose it only where the
// store's clock cannot be trusted to stay within a retention of the truth
// and the keys are few and reused.
const KeepForever time.Duration = -1

// Sweeper is an optional capability, found by type assertion, of a Backend
// and of the other stores of this module that keep records under leases
// (fence tables, queue sources): it removes the records that have outlived
// their retention. A Client sweeps its backend by itself (see
// ClientOptions.SweepEvery) and the leasectl command's gc verb does it on
// demand.
//
// Removal is always safe to run, from any number of processes at once:
// each record is removed in one atomic operation that checks, on the
// store's clock, that it is still past its retention, so a key acquired
// again meanwhile keeps its record. Running it once across replicas
// (Client.Sweep does so under a lease) only saves work.
type Sweeper interface {
	// Sweep visits one page of the store's records, from o.Cursor ("" to
	// begin), removes those past their retention (unless o.DryRun), and
	// returns their keys and the cursor of the next page, "" once the walk
	// is complete. o.Limit (at least 1) is a hint for the page's size, as
	// the COUNT of Valkey's SCAN (unlike Lister.List's limit, which is a
	// bound), and a page may remove nothing while Next is not "".
	// ctx bounds one page.
	Sweep(ctx context.Context, o SweepOptions) (SweepPage, error)
}

// SweepOptions are the arguments of Sweeper.Sweep.
type SweepOptions struct {
	// Cursor is where the page begins: "" for the first, then the Next of
	// the previous page.
	Cursor string
	// Limit is how many records to visit, at least 1.
	Limit int
	// DryRun removes nothing: the page lists what would be removed.
	DryRun bool
}

// SweepPage is one page of a Sweeper's walk.
type SweepPage struct {
	// Removed names what was removed (or, with DryRun, would be): lease
	// keys for a Backend, resources for a fence table, item IDs for a
	// queue.
	Removed []string
	// Next is the cursor of the next page, or "" when the walk is done.
	Next string
}

// SweepKey is the lease under which Client.Sweep runs, so that one
// replica sweeps at a time. Do not use it for anything else.
const SweepKey = "lease/sweep"

// sweepPage is how many records Client.Sweep visits per call of a
// Sweeper: small enough that each call is short (PostgreSQL deletes a
// batch in one statement), large enough that a million keys take a
// thousand calls.
const sweepPage = 1000

// DefaultSweepEvery is how often, at most, a Client sweeps its backend by
// default.
const DefaultSweepEvery = time.Hour

var sweepPolicy = mustPolicy(PolicyOptions{TTL: time.Minute})

func mustPolicy(o PolicyOptions) Policy {
	p, err := NewPolicy(o)
	if err != nil {
		panic(err) // a constant policy: a bug here, not bad input
	}
	return p
}

// Sweep runs every sweeper of the client (its backend, if the backend is a
// Sweeper, then ClientOptions.Sweepers in order) to the end of its walk,
// under the lease SweepKey, which it takes with one TryAcquire and releases
// when done: if another replica is sweeping, Sweep returns at once with an
// error matching ErrNotAcquired and removes nothing. It returns how many
// records it removed. A sweeper that fails (a missing permission, say)
// does not keep the others from running; Sweep returns every failure,
// joined. ctx bounds the whole sweep; between pages Sweep renews its lease,
// and stops if it was lost.
//
// A Client calls Sweep by itself, in the background, at most once every
// ClientOptions.SweepEvery; call it directly to sweep now (the leasectl
// command's gc verb does).
func (c *Client) Sweep(ctx context.Context) (int, error) {
	sweepers := c.sweepers()
	if len(sweepers) == 0 {
		return 0, nil
	}
	h, err := c.TryAcquire(ctx, SweepKey, sweepPolicy)
	if err != nil {
		return 0, fmt.Errorf("lease: sweep: %w", err)
	}
	n, err := sweepAll(ctx, sweepers, h)
	if rerr := h.Release(context.WithoutCancel(ctx)); err == nil && rerr != nil && !errors.Is(rerr, ErrLost) {
		err = rerr
	}
	if err != nil {
		return n, fmt.Errorf("lease: sweep: %w", err)
	}
	return n, nil
}

func (c *Client) sweepers() []Sweeper {
	var out []Sweeper
	if s, ok := c.b.(Sweeper); ok {
		out = append(out, s)
	}
	return append(out, c.extra...)
}

// sweepAll walks each sweeper to its end while h is held. A sweeper that
// fails does not stop the next one; losing h or ctx stops them all.
func sweepAll(ctx context.Context, sweepers []Sweeper, h *Handle) (int, error) {
	n := 0
	var errs []error
	for _, s := range sweepers {
		cursor := ""
		for {
			if err := h.Renew(ctx); err != nil {
				return n, errors.Join(append(errs, err)...)
			}
			page, err := s.Sweep(ctx, SweepOptions{Cursor: cursor, Limit: sweepPage})
			n += len(page.Removed)
			if err != nil {
				errs = append(errs, err)
				break
			}
			if page.Next == "" {
				break
			}
			cursor = page.Next
		}
	}
	return n, errors.Join(errs...)
}

// sweepTimeout bounds one background sweep.
const sweepTimeout = 10 * time.Minute

// sweeping holds when a client sweeps next in the background.
type sweeping struct {
	every time.Duration // 0: never
	next  atomic.Int64  // UnixNano on the system clock; 0 before first use
}

// start sets the schedule: every (0 for the default, negative for never),
// if there is anything to sweep.
func (s *sweeping) start(every time.Duration, any bool) {
	if every == 0 {
		every = DefaultSweepEvery
	}
	if every < 0 || !any {
		every = 0
	}
	s.every = every
}

// maybeSweep starts a background sweep if one is due now, on the system
// clock. It costs a clock reading and an atomic load when none is.
func (c *Client) maybeSweep() {
	if c.sweep.every <= 0 {
		return
	}
	now := time.Now().UnixNano()
	next := c.sweep.next.Load()
	if next == 0 {
		// First use: the first sweep comes half to one period later, so
		// that short-lived processes and tests do not sweep, and replicas
		// started together do not all try at once.
		half := c.sweep.every / 2
		c.sweep.next.CompareAndSwap(0, now+int64(half)+mrand.Int64N(int64(half)+1))
		return
	}
	if now < next || !c.sweep.next.CompareAndSwap(next, now+int64(c.sweep.every+spread(c.sweep.every))) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
		defer cancel()
		_, _ = c.Sweep(ctx) // errors dropped: see ClientOptions.SweepEvery
	}()
}
