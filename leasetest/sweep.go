package leasetest

import (
	"errors"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/golib/lease/lease"
)

// sweepCases check lease.Sweeper on Suite.NewRetentionBackend: a record
// ends a retention after its lease, never sooner, and the next token of
// its key is still higher.
func sweepCases() []testCase {
	return []testCase{
		{"Sweeper/ReleasedRecordEnds", func(e *env) {
			s := e.sweeper()
			key := e.key("k")
			a := e.acquire(key, "done")
			if err := e.b.Release(e.ctx(), a); err != nil {
				e.t.Fatal(err)
			}
			e.sweepAll(s, false)
			if r := e.inspect(key); r.Token != a.Token {
				e.t.Fatalf("Inspect(%q) within the retention after release = %+v, want token %d kept", key, r, a.Token)
			}
			e.wait(e.s.Retention + e.slack())
			e.sweepAll(s, false)
			if r := e.inspect(key); r.Token != 0 || r.Held {
				e.t.Fatalf("Inspect(%q) a retention after release and a sweep = %+v, want no record (token 0)", key, r)
			}
			if b := e.acquire(key, "next"); b.Token <= a.Token {
				e.t.Fatalf("token after the record ended = %d, want above the last one, %d", b.Token, a.Token)
			}
		}},
		{"Sweeper/CrashedHolderEnds", func(e *env) {
			s := e.sweeper()
			key := e.key("k")
			ttl := e.s.TTL
			a := e.acquireTTL(key, "crashed", ttl)
			if removed := e.sweepAll(s, false); slices.Contains(removed, key) {
				e.t.Fatalf("Sweep removed the live record of %q", key)
			}
			e.expire(ttl)
			if removed := e.sweepAll(s, false); slices.Contains(removed, key) {
				e.t.Fatalf("Sweep removed %q right after its lease expired, within the retention", key)
			}
			if r := e.inspect(key); r.Token != a.Token {
				e.t.Fatalf("Inspect(%q) within the retention after expiry = %+v, want token %d kept", key, r, a.Token)
			}
			e.wait(e.s.Retention + e.slack())
			if removed := e.sweepAll(s, false); !slices.Contains(removed, key) {
				e.t.Fatalf("Sweep removed %v, want %q among them: its lease expired a retention ago", removed, key)
			}
			if r := e.inspect(key); r.Token != 0 {
				e.t.Fatalf("Inspect(%q) after the sweep = %+v, want no record", key, r)
			}
			e.mustLose("Renew of the swept holder", e.b.Renew(e.ctx(), a, ttl), lease.RecordLost)
			if b := e.acquire(key, "next"); b.Token <= a.Token {
				e.t.Fatalf("token after the record was swept = %d, want above the last one, %d", b.Token, a.Token)
			}
		}},
		{"Sweeper/LiveRecordStays", func(e *env) {
			s := e.sweeper()
			key := e.key("k")
			a := e.acquireTTL(key, "alive", max(longTTL, 4*e.s.Retention))
			e.wait(e.s.Retention + e.slack())
			e.sweepAll(s, false)
			e.mustHold(a)
			if err := e.b.Renew(e.ctx(), a, max(longTTL, 4*e.s.Retention)); err != nil {
				e.t.Fatalf("Renew after a sweep: %v", err)
			}
		}},
		{"Sweeper/DryRunRemovesNothing", func(e *env) {
			s := e.sweeper()
			key := e.key("k")
			a := e.acquireTTL(key, "crashed", e.s.TTL)
			e.expire(e.s.TTL)
			e.wait(e.s.Retention + e.slack())
			if listed := e.sweepAll(s, true); !slices.Contains(listed, key) {
				e.t.Fatalf("dry-run Sweep listed %v, want %q among them", listed, key)
			}
			if r := e.inspect(key); r.Token != a.Token {
				e.t.Fatalf("Inspect(%q) after a dry run = %+v, want token %d kept", key, r, a.Token)
			}
		}},
		{"Sweeper/RacingAcquisitions", func(e *env) {
			s := e.sweeper()
			keys := []string{e.key("a"), e.key("b"), e.key("c")}
			ctx := e.ctx()
			end := e.clock().Now().Add(3 * e.s.Retention)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := s.Sweep(ctx, lease.SweepOptions{Limit: 1000}); err != nil {
						e.t.Errorf("Sweep: %v", err)
						return
					}
					if e.s.Clock != nil {
						e.s.Clock.Advance(e.s.Retention / 7)
					}
				}
			}()
			for i, key := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var last lease.Token
					for n := 0; e.clock().Now().Before(end); n++ {
						a := lease.Acquisition{Key: key, Owner: "racer", Nonce: e.nonce()}
						tok, err := e.b.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: a.Owner, Nonce: a.Nonce, TTL: e.s.TTL})
						if errors.Is(err, lease.ErrNotAcquired) {
							runtime.Gosched() // held by a crashed turn: wait for it
							continue
						}
						if err != nil {
							e.t.Errorf("Acquire(%q): %v", key, err)
							return
						}
						if tok <= last {
							e.t.Errorf("Acquire(%q) granted token %d after %d: a token went down across a sweep", key, tok, last)
							return
						}
						last, a.Token = tok, tok
						switch (n + i) % 3 {
						case 0: // release
							if err := e.b.Release(ctx, a); err != nil {
								e.t.Errorf("Release: %v", err)
								return
							}
						case 1: // crash: let it expire
						case 2: // renew, then release
							if err := e.b.Renew(ctx, a, e.s.TTL); err != nil {
								e.t.Errorf("Renew of a live holder across sweeps: %v", err)
								return
							}
							if err := e.b.Release(ctx, a); err != nil {
								e.t.Errorf("Release: %v", err)
								return
							}
						}
						if e.s.Clock == nil {
							time.Sleep(time.Duration(n%4) * e.s.Retention / 3)
						}
					}
				}()
			}
			// The acquirers finish by the clock; then stop the sweeper.
			done := make(chan struct{})
			go func() {
				for e.clock().Now().Before(end) {
					time.Sleep(10 * time.Millisecond)
				}
				close(done)
			}()
			<-done
			close(stop)
			wg.Wait()
		}},
	}
}

// sweeper switches e to the retention backend and returns it as a
// Sweeper, or skips.
func (e *env) sweeper() lease.Sweeper {
	e.t.Helper()
	if e.s.NewRetentionBackend == nil || e.s.Retention <= 0 {
		e.t.Skip("Suite.NewRetentionBackend or Suite.Retention not set")
	}
	e.b = e.s.NewRetentionBackend(e.t)
	s, ok := e.b.(lease.Sweeper)
	if !ok {
		e.t.Fatalf("%T from NewRetentionBackend is not a lease.Sweeper", e.b)
	}
	return s
}

// slack is how much past a deadline a subtest waits: a moment on a fake
// clock, a round trip's margin on real time.
func (e *env) slack() time.Duration {
	if e.s.Clock != nil {
		return time.Millisecond
	}
	return e.s.Retention/2 + 100*time.Millisecond
}

// sweepAll walks s to its end and returns what it removed (or would).
func (e *env) sweepAll(s lease.Sweeper, dryRun bool) []string {
	e.t.Helper()
	var removed []string
	cursor := ""
	for {
		p, err := s.Sweep(e.ctx(), lease.SweepOptions{Cursor: cursor, Limit: 100, DryRun: dryRun})
		if err != nil {
			e.t.Fatalf("Sweep: %v", err)
		}
		removed = append(removed, p.Removed...)
		if p.Next == "" {
			return removed
		}
		cursor = p.Next
	}
}
