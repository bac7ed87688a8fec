package leasetest

import (
	"time"

	"github.com/golib/lease/lease"
)

// historyCases check the history a record keeps: when the key was
// acquired and last renewed, and how many times its holder changed
// (lease.Record's AcquiredAt, RenewedAt and Transitions).
func historyCases() []testCase {
	return []testCase{
		{"History/AcquiredRenewedAndTransitions", func(e *env) {
			key := e.key("k")
			step := func() { e.wait(20 * time.Millisecond) } // the backend's clock moves on
			before := e.clock().Now()
			a := e.acquire(key, "first")
			r := e.inspect(key)
			e.checkAcquiredAround(r, before)
			if !r.RenewedAt.Equal(r.AcquiredAt) || r.Transitions != 0 {
				e.t.Fatalf("after the first grant Inspect = %+v; want RenewedAt = AcquiredAt and 0 transitions", r)
			}
			acquired := r.AcquiredAt

			step()
			if err := e.b.Renew(e.ctx(), a, longTTL); err != nil {
				e.t.Fatal(err)
			}
			renewed := e.inspect(key)
			if !renewed.AcquiredAt.Equal(acquired) || !renewed.RenewedAt.After(acquired) || renewed.Transitions != 0 {
				e.t.Fatalf("after Renew Inspect = %+v; want AcquiredAt %v kept, RenewedAt after it, 0 transitions", renewed, acquired)
			}

			step()
			if tok, err := e.b.Acquire(e.ctx(), lease.AcquireRequest{Key: key, Owner: a.Owner, Nonce: a.Nonce, TTL: longTTL}); err != nil || tok != a.Token {
				e.t.Fatalf("Acquire retried with the holder's nonce = %d, %v; want token %d", tok, err, a.Token)
			}
			r = e.inspect(key)
			if !r.AcquiredAt.Equal(acquired) || !r.RenewedAt.After(renewed.RenewedAt) || r.Transitions != 0 {
				e.t.Fatalf("after an Acquire retried with the holder's nonce Inspect = %+v; want AcquiredAt %v kept, RenewedAt after %v, 0 transitions",
					r, acquired, renewed.RenewedAt)
			}
			if _, err := e.b.Acquire(e.ctx(), lease.AcquireRequest{Key: key, Owner: "refused", Nonce: e.nonce(), TTL: longTTL}); err == nil {
				e.t.Fatal("Acquire of a held key succeeded")
			}
			if got := e.inspect(key); got.Transitions != 0 || !got.AcquiredAt.Equal(acquired) {
				e.t.Fatalf("after a refused Acquire Inspect = %+v; want nothing changed", got)
			}

			step()
			if err := e.b.Release(e.ctx(), a); err != nil {
				e.t.Fatal(err)
			}
			free := e.inspect(key)
			if free.Held || !free.AcquiredAt.Equal(acquired) || free.Transitions != 0 {
				e.t.Fatalf("after Release Inspect = %+v; want free, with the last acquisition's AcquiredAt %v", free, acquired)
			}
			b := e.acquire(key, "second")
			r = e.inspect(key)
			if r.Transitions != 1 || !r.AcquiredAt.After(acquired) || !r.RenewedAt.Equal(r.AcquiredAt) {
				e.t.Fatalf("after a new holder's grant Inspect = %+v; want 1 transition, AcquiredAt after %v, RenewedAt = AcquiredAt", r, acquired)
			}
			if err := e.b.Release(e.ctx(), b); err != nil {
				e.t.Fatal(err)
			}
			e.acquire(key, "second") // the same owner string, a new acquisition
			if r = e.inspect(key); r.Transitions != 2 {
				e.t.Fatalf("after a grant to the same owner string again Inspect = %+v; want 2 transitions", r)
			}
		}},
		{"History/ListShowsIt", func(e *env) {
			l := e.lister()
			prefix := e.key("")
			a := e.acquire(prefix+"a", "first")
			if err := e.b.Release(e.ctx(), a); err != nil {
				e.t.Fatal(err)
			}
			e.acquire(prefix+"a", "second")
			want := e.inspect(prefix + "a")
			got := e.listAll(l, prefix, 10)[prefix+"a"]
			if got.Transitions != 1 || !got.AcquiredAt.Equal(want.AcquiredAt) || !got.RenewedAt.Equal(want.RenewedAt) {
				e.t.Fatalf("List record %+v; want Inspect's history %+v", got, want)
			}
		}},
		{"History/ForceReleaseReturnsIt", func(e *env) {
			f := e.forceReleaser()
			key := e.key("k")
			e.acquire(key, "stuck")
			want := e.inspect(key)
			prev, err := f.ForceRelease(e.ctx(), key, 0)
			if err != nil {
				e.t.Fatal(err)
			}
			if !prev.AcquiredAt.Equal(want.AcquiredAt) || !prev.RenewedAt.Equal(want.RenewedAt) || prev.Transitions != want.Transitions {
				e.t.Fatalf("ForceRelease returned %+v; want Inspect's history %+v", prev, want)
			}
			e.acquire(key, "next")
			if r := e.inspect(key); r.Transitions != 1 {
				e.t.Fatalf("after a forced release and a new grant Inspect = %+v; want 1 transition", r)
			}
		}},
	}
}

// checkAcquiredAround fails unless r's AcquiredAt is the time of an
// acquisition begun at before: on a FakeClock exactly, on real time within
// a minute (the backend's clock is another machine's).
func (e *env) checkAcquiredAround(r lease.Record, before time.Time) {
	e.t.Helper()
	if e.s.Clock != nil {
		if !r.AcquiredAt.Equal(before) {
			e.t.Fatalf("Inspect = %+v; want AcquiredAt %v, the fake clock's time", r, before)
		}
		return
	}
	if d := r.AcquiredAt.Sub(before); r.AcquiredAt.IsZero() || d < -time.Minute || d > time.Minute {
		e.t.Fatalf("Inspect = %+v; want AcquiredAt about %v", r, before)
	}
}
