package leasetest

import (
	"context"
	"iter"
	"slices"
	"time"

	"github.com/golib/lease/lease"
)

// observed is what an observation test's goroutine saw.
type observed struct {
	o   lease.Observation
	err error
}

// observe ranges over Client.Observe of key in a goroutine, with poll as
// ObserveOptions.Poll, and sends what it sees on the returned channel,
// which holds plenty so that the goroutine is never the slow observer.
// The observation ends with the test.
func (e *env) observe(key string, poll time.Duration) <-chan observed {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := e.client("observer")
	out := make(chan observed, 1000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for o, err := range c.Observe(ctx, key, lease.ObserveOptions{Poll: poll}) {
			out <- observed{o, err}
		}
	}()
	e.t.Cleanup(func() { cancel(); <-done })
	return out
}

// next returns the next observation on ch, skipping read errors (a
// reconnection may cause some), and fails the test if none comes within
// 15 seconds of real time.
func (e *env) next(ch <-chan observed, what string) lease.Observation {
	e.t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case got := <-ch:
			if got.err != nil {
				e.t.Logf("observe: %v", got.err)
				continue
			}
			return got.o
		case <-timeout:
			e.t.Fatalf("no observation within 15s; waiting for %s", what)
		}
	}
}

// expectObs fails unless o reports change, with held and owner and token.
func (e *env) expectObs(o lease.Observation, change lease.Change, held bool, owner string, token lease.Token) {
	e.t.Helper()
	if o.Change != change || o.Held != held || o.Owner != owner || o.Token != token {
		e.t.Fatalf("observation %v %+v, want %v with held=%v owner=%q token=%d", o.Change, o.Record, change, held, owner, token)
	}
}

func observeCases() []testCase {
	return []testCase{
		{"Observe/EveryChangeInOrder", func(e *env) {
			key := e.key("k")
			ch := e.observe(key, longTTL)
			first := e.next(ch, "the initial state")
			e.expectObs(first, lease.ChangeInitial, false, "", 0)
			a := e.acquire(key, "a")
			e.expectObs(e.next(ch, "a's grant"), lease.ChangeAcquired, true, "a", a.Token)
			if err := e.b.Release(e.ctx(), a); err != nil {
				e.t.Fatal(err)
			}
			e.expectObs(e.next(ch, "a's release"), lease.ChangeReleased, false, "", a.Token)
			b := e.acquire(key, "b")
			e.expectObs(e.next(ch, "b's grant"), lease.ChangeAcquired, true, "b", b.Token)
			if _, ok := e.b.(lease.HandOffer); ok {
				t := e.handOff(b, longTTL, "c")
				o := e.next(ch, "b's hand-off")
				e.expectObs(o, lease.ChangeHandedOff, false, "b", t)
				if !slices.Equal(o.Candidates, []string{"c"}) {
					e.t.Fatalf("hand-off observation %+v, want candidates [c]", o.Record)
				}
				c, err := e.acquireAs(key, "c", longTTL)
				if err != nil {
					e.t.Fatal(err)
				}
				e.expectObs(e.next(ch, "c's grant"), lease.ChangeAcquired, true, "c", t)
				b = c
			}
			if fr, ok := e.b.(lease.ForceReleaser); ok {
				if _, err := fr.ForceRelease(e.ctx(), key, 0); err != nil {
					e.t.Fatal(err)
				}
				e.expectObs(e.next(ch, "the force release"), lease.ChangeForceReleased, false, "", b.Token)
			}
		}},
		{"Observe/ExpiryIsSeenWithoutNotification", func(e *env) {
			key := e.key("k")
			a := e.acquireShort(key, "a")
			ch := e.observe(key, longTTL) // no poll within the test: only the holder's time tells
			e.expectObs(e.next(ch, "the initial state"), lease.ChangeInitial, true, "a", a.Token)
			e.expire(e.s.TTL)
			e.expectObs(e.next(ch, "the expiry"), lease.ChangeExpired, false, "", a.Token)
		}},
		{"Observe/SlowObserverGetsTheLatestState", func(e *env) {
			key := e.key("k")
			c := e.client("observer")
			next, stop := iter.Pull2(c.Observe(e.ctx(), key, lease.ObserveOptions{Poll: longTTL}))
			defer stop()
			if o, err, ok := next(); !ok || err != nil || o.Change != lease.ChangeInitial {
				e.t.Fatalf("first observation = %+v, %v, %v; want the initial state", o, err, ok)
			}
			// Five changes while the observer does not ask.
			var last lease.Acquisition
			for _, owner := range []string{"a", "b", "c", "d", "e"} {
				last = e.acquire(key, owner)
				if owner != "e" {
					if err := e.b.Release(e.ctx(), last); err != nil {
						e.t.Fatal(err)
					}
				}
			}
			o, err, ok := next()
			if !ok || err != nil {
				e.t.Fatalf("second observation: %v, %v", err, ok)
			}
			e.expectObs(o, lease.ChangeAcquired, true, "e", last.Token)
		}},
		{"Observe/ReconnectLosesNoFinalState", func(e *env) {
			if e.s.Reconnect == nil {
				e.t.Skip("Suite.Reconnect is nil")
			}
			key := e.key("k")
			a := e.acquire(key, "a")
			ch := e.observe(key, longTTL) // no poll within the test: only notifications tell
			e.expectObs(e.next(ch, "the initial state"), lease.ChangeInitial, true, "a", a.Token)
			e.s.Reconnect(e.t)
			if err := e.b.Release(e.ctx(), a); err != nil {
				e.t.Fatal(err)
			}
			b := e.acquire(key, "b")
			// The release may be seen or skipped; b's grant must be seen.
			for {
				o := e.next(ch, "b's grant after the reconnection")
				if o.Held && o.Owner == "b" && o.Token == b.Token && o.Change == lease.ChangeAcquired {
					return
				}
				if o.Held || o.Token != a.Token || o.Change != lease.ChangeReleased {
					e.t.Fatalf("observation %v %+v after the reconnection, want a's release or b's grant", o.Change, o.Record)
				}
			}
		}},
		{"ChangeWatcher/WakesOnGrantNotRenewal", func(e *env) {
			w, ok := e.b.(lease.ChangeWatcher)
			if !ok {
				e.t.Skip("the backend does not implement lease.ChangeWatcher")
			}
			key := e.key("k")
			ch, stop, err := w.WatchChanges(e.ctx(), key)
			if err != nil {
				e.t.Fatalf("WatchChanges: %v", err)
			}
			defer stop()
			select {
			case <-ch: // the watch is in place
			case <-time.After(10 * time.Second):
				e.t.Fatal("WatchChanges sent no value within 10s of its setup")
			}
			a := e.acquire(key, "a")
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				e.t.Fatal("no change announced within 10s of a grant")
			}
			if err := e.b.Release(e.ctx(), a); err != nil {
				e.t.Fatal(err)
			}
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				e.t.Fatal("no change announced within 10s of a release")
			}
			stop()
			stop() // stopping twice is harmless
		}},
	}
}
