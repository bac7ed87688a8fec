package leasetest

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/golib/lease/lease"
)

// standbyRounds is how many TTLs the idle-waiter subtest counts calls over.
const standbyRounds = 4

func standbyCases() []testCase {
	return []testCase{
		{"Standby/IdleWaiterIsQuiet", func(e *env) {
			// A waiter on a key whose holder keeps renewing makes at most
			// one backend call per TTL, once settled: it sleeps until the
			// holder's lease would end, and at least Poll (default TTL)
			// once it saw the holder renew. Without release notifications
			// a waiter must ask to see a release, so this holds only for
			// a lease.ReleaseWatcher.
			if _, ok := e.b.(lease.ReleaseWatcher); !ok {
				e.t.Skip("the backend does not implement lease.ReleaseWatcher: its waiters poll every Retry")
			}
			ttl := e.s.TTL
			key := e.key("k")
			holder := e.acquireTTL(key, "holder", ttl)
			b, calls := CountCalls(e.b)
			p := e.policyWith(lease.PolicyOptions{TTL: ttl})
			ctx, cancel := context.WithCancel(e.ctx())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				h, err := e.clientOn(b, "waiter", e.clock()).Acquire(ctx, key, p)
				if err == nil {
					err = errors.New("granted a key whose holder kept renewing, as " + h.Owner())
				}
				done <- err
			}()
			// The holder renews every TTL/3, directly on the backend. The
			// first TTL lets the waiter settle (a watcher may wake it once
			// or twice as it starts); the calls of the next rounds count.
			var (
				before int64
				from   time.Time
			)
			for i := range 3 * (1 + standbyRounds) {
				if i == 3 {
					before, from = calls.Acquire.Load(), e.clock().Now()
				}
				if e.s.Clock != nil {
					if err := e.s.Clock.WaitForTimers(e.ctx(), 1); err != nil {
						e.t.Fatalf("the waiter never slept: %v", err)
					}
				}
				e.wait(ttl / 3)
				if err := e.b.Renew(e.ctx(), holder, ttl); err != nil {
					e.t.Fatalf("holder's renewal %d: %v", i, err)
				}
			}
			n := calls.Acquire.Load() - before
			// One call per TTL, and one more at the window's edge. The
			// window is a little longer than the rounds, by the renewals'
			// own latency.
			rounds := int64(e.clock().Now().Sub(from) / ttl)
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				e.t.Fatalf("waiter's Acquire = %v, want context.Canceled", err)
			}
			e.t.Logf("%d Acquire calls over %d TTLs of %v", n, rounds, ttl)
			if n > rounds+1 {
				e.t.Fatalf("an idle waiter made %d Acquire calls over %d TTLs of %v, want at most %d (one per TTL)",
					n, rounds, ttl, rounds+1)
			}
			if n == 0 {
				e.t.Fatalf("an idle waiter made no Acquire call over %d TTLs of %v: it no longer checks for a holder that stopped renewing", standbyRounds, ttl)
			}
		}},
		{"Standby/HandOverByNotification", func(e *env) {
			// On a backend that notifies releases, a waiter that is asleep
			// until the holder's lease would end (here 30s) is granted the
			// key after a release with one more Acquire call, long before.
			if _, ok := e.b.(lease.ReleaseWatcher); !ok {
				e.t.Skip("the backend does not implement lease.ReleaseWatcher")
			}
			key := e.key("k")
			holder := e.acquire(key, "holder")
			b, calls := CountCalls(e.b)
			ctx, cancel := context.WithTimeout(e.ctx(), longTTL*2/3)
			defer cancel()
			type result struct {
				h   *lease.Handle
				err error
			}
			done := make(chan result, 1)
			go func() {
				h, err := e.clientOn(b, "waiter", e.clock()).Acquire(ctx, key, e.policy())
				done <- result{h, err}
			}()
			// Let the waiter make its first attempt, set up its watch and
			// go quiet: no call for a second (on a fake clock, its timer
			// is set and time stands still).
			if e.s.Clock != nil {
				if err := e.s.Clock.WaitForTimers(e.ctx(), 1); err != nil {
					e.t.Fatalf("the waiter never slept: %v", err)
				}
			} else {
				last, quiet := int64(-1), 0
				for i := 0; quiet < 10; i++ {
					if i == 100 {
						e.t.Fatalf("the waiter never went quiet for a second in 10s: %d Acquire calls", calls.Acquire.Load())
					}
					time.Sleep(100 * time.Millisecond)
					if n := calls.Acquire.Load(); n == last && calls.WatchReleases.Load() > 0 {
						quiet++
					} else {
						last, quiet = n, 0
					}
				}
			}
			if calls.WatchReleases.Load() == 0 {
				e.t.Fatal("the waiter set up no release watch")
			}
			before := calls.Acquire.Load()
			if err := e.b.Release(e.ctx(), holder); err != nil {
				e.t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				e.t.Fatalf("waiter's Acquire after the release = %v; the release notification did not arrive", r.err)
			}
			defer r.h.Release(context.WithoutCancel(ctx))
			if n := calls.Acquire.Load() - before; n > 1 {
				e.t.Fatalf("the waiter made %d Acquire calls after the release, want 1 (woken by the notification)", n)
			}
		}},
		{"Standby/ReleasedBeforeWatch", func(e *env) {
			// The holder releases the key after the waiter's attempt found
			// it held and before the waiter's watch is set up. The waiter
			// must still be granted the key long before the holder's lease
			// (here 30s) would have ended, with no clock moving.
			if _, ok := e.b.(lease.ReleaseWatcher); !ok {
				e.t.Skip("the backend does not implement lease.ReleaseWatcher")
			}
			key := e.key("k")
			holder := e.acquire(key, "holder")
			b := &releaseFirst{Backend: e.b, w: e.b.(lease.ReleaseWatcher), release: func() error {
				return e.b.Release(e.ctx(), holder)
			}}
			ctx, cancel := context.WithTimeout(e.ctx(), longTTL*2/3)
			defer cancel()
			h, err := e.clientOn(b, "waiter", e.clock()).Acquire(ctx, key, e.policy())
			if err != nil {
				e.t.Fatalf("waiter's Acquire, the key released just before its watch = %v; a release before the watch was in place went unseen", err)
			}
			defer h.Release(context.WithoutCancel(ctx))
			if b.watches.Load() != 1 {
				e.t.Fatalf("the waiter set up %d release watches, want 1", b.watches.Load())
			}
		}},
	}
}

// releaseFirst is a backend whose first WatchReleases call runs release
// before it sets up the watch: the holder's release lands between a
// waiter's refused attempt and its watch.
type releaseFirst struct {
	lease.Backend
	w       lease.ReleaseWatcher
	release func() error
	watches atomic.Int64
}

func (r *releaseFirst) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if r.watches.Add(1) == 1 {
		if err := r.release(); err != nil {
			return nil, nil, err
		}
	}
	return r.w.WatchReleases(ctx, key)
}
