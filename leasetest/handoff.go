package leasetest

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/golib/lease/lease"
)

// handOffer returns the backend as a lease.HandOffer, or skips the
// subtest.
func (e *env) handOffer() lease.HandOffer {
	e.t.Helper()
	ho, ok := e.b.(lease.HandOffer)
	if !ok {
		e.t.Skip("the backend does not implement lease.HandOffer")
	}
	return ho
}

// handOff hands a off to candidates for window and returns the offered
// token, failing the test on an error.
func (e *env) handOff(a lease.Acquisition, window time.Duration, candidates ...string) lease.Token {
	e.t.Helper()
	t, err := e.handOffer().HandOff(e.ctx(), a, lease.Offer{Candidates: candidates, Window: window})
	if err != nil {
		e.t.Fatalf("HandOff(%q, token %d) to %q: %v", a.Key, a.Token, candidates, err)
	}
	if t <= a.Token {
		e.t.Fatalf("HandOff(%q, token %d) offered token %d, want a higher one", a.Key, a.Token, t)
	}
	return t
}

// acquireAs asks for key as owner once, directly on the backend.
func (e *env) acquireAs(key, owner string, ttl time.Duration) (lease.Acquisition, error) {
	nonce := e.nonce()
	tok, err := e.b.Acquire(e.ctx(), lease.AcquireRequest{Key: key, Owner: owner, Nonce: nonce, TTL: ttl})
	return lease.Acquisition{Key: key, Owner: owner, Nonce: nonce, Token: tok}, err
}

func handOffCases() []testCase {
	return []testCase{
		{"HandOff/OfferThenCandidateTakesItWithTheOfferedToken", func(e *env) {
			key := e.key("k")
			a := e.acquire(key, "old")
			before := e.inspect(key)
			t := e.handOff(a, longTTL, "next")
			r := e.inspect(key)
			if r.Held || r.Token != t || r.Owner != "old" || !slices.Equal(r.Candidates, []string{"next"}) ||
				r.Ending != lease.EndHandedOff || r.Remaining <= 0 || r.Remaining > longTTL {
				e.t.Fatalf("Inspect after HandOff = %+v, want free, offered to [next] with token %d for at most %v, ending handed off", r, t, longTTL)
			}
			b, err := e.acquireAs(key, "next", longTTL)
			if err != nil {
				e.t.Fatalf("the candidate's Acquire: %v", err)
			}
			if b.Token != t {
				e.t.Fatalf("the candidate got token %d, want the offered token %d", b.Token, t)
			}
			e.mustHold(b)
			if r := e.inspect(key); r.Candidates != nil || r.Transitions != before.Transitions+1 {
				e.t.Fatalf("Inspect after the candidate's grant = %+v, want no offer and %d transitions", r, before.Transitions+1)
			}
			// Tokens keep rising through a second hand-off.
			t2 := e.handOff(b, longTTL, "third")
			c, err := e.acquireAs(key, "third", longTTL)
			if err != nil || c.Token != t2 || t2 <= t {
				e.t.Fatalf("second hand-off: offered %d, candidate got %d (%v), want %d > %d", t2, c.Token, err, t2, t)
			}
		}},
		{"HandOff/OldHolderIsToldHandedOff", func(e *env) {
			key := e.key("k")
			a := e.acquire(key, "old")
			t := e.handOff(a, longTTL, "next")
			e.mustLose("Renew after HandOff", e.b.Renew(e.ctx(), a, longTTL), lease.HandedOff)
			e.mustLose("Release after HandOff", e.b.Release(e.ctx(), a), lease.HandedOff)
			_, err := e.handOffer().HandOff(e.ctx(), a, lease.Offer{Candidates: []string{"x"}, Window: longTTL})
			e.mustLose("a second HandOff", err, lease.HandedOff)
			byNonce := a
			byNonce.Token = 0
			if err := e.b.Release(e.ctx(), byNonce); !errors.Is(err, lease.ErrLost) {
				e.t.Fatalf("Release by nonce alone after HandOff = %v, want ErrLost", err)
			}
			if r := e.inspect(key); !slices.Equal(r.Candidates, []string{"next"}) || r.Token != t {
				e.t.Fatalf("Inspect after the old holder's calls = %+v, want the offer to [next] with token %d unchanged", r, t)
			}
			if _, err := e.acquireAs(key, "next", longTTL); err != nil {
				e.t.Fatal(err)
			}
			e.mustLose("Renew after the candidate took the key", e.b.Renew(e.ctx(), a, longTTL), lease.Superseded)
		}},
		{"HandOff/RefusedFromANonHolder", func(e *env) {
			key := e.key("k")
			a := e.acquire(key, "holder")
			ho := e.handOffer()
			wrong := a
			wrong.Nonce = e.nonce()
			_, err := ho.HandOff(e.ctx(), wrong, lease.Offer{Candidates: []string{"thief"}, Window: longTTL})
			e.mustLose("HandOff with another nonce", err, lease.Superseded)
			e.mustHold(a)
			if r := e.inspect(key); r.Candidates != nil {
				e.t.Fatalf("Inspect after a refused HandOff = %+v, want no offer", r)
			}
			short := e.acquireShort(e.key("short"), "holder")
			e.expire(e.s.TTL)
			_, err = ho.HandOff(e.ctx(), short, lease.Offer{Candidates: []string{"x"}, Window: longTTL})
			e.mustLose("HandOff of an expired lease", err, lease.Expired)
			if _, err := e.acquireAs(short.Key, "anyone", longTTL); err != nil {
				e.t.Fatalf("Acquire after a refused HandOff of an expired lease: %v", err)
			}
		}},
		{"HandOff/OthersRefusedWhileTheOfferStands", func(e *env) {
			key := e.key("k")
			t := e.handOff(e.acquire(key, "old"), longTTL, "b", "c")
			_, err := e.acquireAs(key, "outsider", longTTL)
			var na *lease.NotAcquiredError
			if !errors.As(err, &na) || na.Token != t || !slices.Equal(na.Candidates, []string{"b", "c"}) || na.Remaining <= 0 {
				e.t.Fatalf("Acquire by a non-candidate = %v, want a *lease.NotAcquiredError naming candidates [b c], token %d and the window left", err, t)
			}
			// The first candidate to ask gets it; the second finds it held.
			c, err := e.acquireAs(key, "c", longTTL)
			if err != nil || c.Token != t {
				e.t.Fatalf("Acquire by candidate c = token %d, %v; want token %d", c.Token, err, t)
			}
			if _, err := e.acquireAs(key, "b", longTTL); !errors.As(err, &na) || na.Holder != "c" {
				e.t.Fatalf("Acquire by candidate b after c took the key = %v, want held by c", err)
			}
		}},
		{"HandOff/FreeForAnyoneAfterTheWindow", func(e *env) {
			key := e.key("k")
			t := e.handOff(e.acquire(key, "old"), e.s.TTL, "gone")
			e.expire(e.s.TTL)
			if r := e.inspect(key); r.Held || r.Candidates != nil || r.Ending != lease.EndHandedOff {
				e.t.Fatalf("Inspect after the window = %+v, want free, no offer, ending handed off", r)
			}
			x, err := e.acquireAs(key, "anyone", longTTL)
			if err != nil {
				e.t.Fatalf("Acquire after the window: %v", err)
			}
			if x.Token <= t {
				e.t.Fatalf("Acquire after the window got token %d, want above the offered %d", x.Token, t)
			}
		}},
		{"HandOff/WakesTheWaitingCandidate", func(e *env) {
			if _, ok := e.b.(lease.ReleaseWatcher); !ok {
				e.t.Skip("the backend does not implement lease.ReleaseWatcher")
			}
			key := e.key("k")
			a := e.acquire(key, "old")
			c := e.client("next")
			p := e.policyWith(lease.PolicyOptions{Wait: 20 * time.Second, Poll: longTTL})
			got := make(chan error, 1)
			var h *lease.Handle
			go func() {
				var err error
				h, err = c.Acquire(e.ctx(), key, p)
				got <- err
			}()
			// Let the candidate find the key held and watch it.
			time.Sleep(300 * time.Millisecond)
			t := e.handOff(a, longTTL, "next")
			select {
			case err := <-got:
				if err != nil {
					e.t.Fatalf("the waiting candidate's Acquire: %v", err)
				}
				if h.Token() != t {
					e.t.Fatalf("the candidate got token %d, want the offered %d", h.Token(), t)
				}
			case <-time.After(10 * time.Second):
				e.t.Fatal("the waiting candidate's Acquire did not return within 10s of the hand-off; the holder's TTL was 30s")
			}
		}},
		{"HandOff/ManagedRenewerReportsHandedOff", func(e *env) {
			e.handOffer()
			key := e.key("k")
			c := e.client("old")
			h, err := c.TryAcquire(e.ctx(), key, e.policy())
			if err != nil {
				e.t.Fatal(err)
			}
			m, err := h.StartManaged(context.Background())
			if err != nil {
				e.t.Fatal(err)
			}
			if err := h.HandOff(e.ctx(), lease.Offer{Candidates: []string{"next"}}); err != nil {
				e.t.Fatalf("Handle.HandOff: %v", err)
			}
			select {
			case <-m.Lost():
			default:
				e.t.Fatal("the renewer's Lost is not closed after HandOff returned")
			}
			e.mustLose("Managed.Err after HandOff", m.Err(), lease.HandedOff)
			if err := h.Renew(e.ctx()); !errors.Is(err, lease.ErrLost) {
				e.t.Fatalf("Renew after HandOff = %v, want ErrLost", err)
			}
			if r := e.inspect(key); r.Token <= h.Token() || !slices.Equal(r.Candidates, []string{"next"}) {
				e.t.Fatalf("Inspect after Handle.HandOff = %+v, want an offer to [next] above token %d", r, h.Token())
			}
			// A bad offer sends nothing and leaves a handle usable.
			h2, err := c.TryAcquire(e.ctx(), e.key("k2"), e.policy())
			if err != nil {
				e.t.Fatal(err)
			}
			if err := h2.HandOff(e.ctx(), lease.Offer{}); !errors.Is(err, lease.ErrInvalidOffer) {
				e.t.Fatalf("HandOff with no candidate = %v, want ErrInvalidOffer", err)
			}
			if err := h2.Renew(e.ctx()); err != nil {
				e.t.Fatalf("Renew after a refused offer: %v", err)
			}
		}},
		{"HandOff/ForceReleaseEndsTheOffer", func(e *env) {
			fr, ok := e.b.(lease.ForceReleaser)
			if !ok {
				e.t.Skip("the backend does not implement lease.ForceReleaser")
			}
			key := e.key("k")
			t := e.handOff(e.acquire(key, "old"), longTTL, "next")
			if _, err := fr.ForceRelease(e.ctx(), key, 0); err != nil {
				e.t.Fatal(err)
			}
			if r := e.inspect(key); r.Held || r.Candidates != nil || r.Token != t || r.Ending != lease.EndForceReleased {
				e.t.Fatalf("Inspect after ForceRelease of an offer = %+v, want free, no offer, token %d, force-released", r, t)
			}
			if x, err := e.acquireAs(key, "anyone", longTTL); err != nil || x.Token <= t {
				e.t.Fatalf("Acquire after the offer was force-released = token %d, %v; want a token above %d", x.Token, err, t)
			}
		}},
		{"Preferred/RecordedNeverTakes", func(e *env) {
			e.handOffer()
			key := e.key("k")
			a := e.acquire(key, "leader")
			nonce := e.nonce()
			_, err := e.b.Acquire(e.ctx(), lease.AcquireRequest{Key: key, Owner: "newer", Nonce: nonce, TTL: longTTL, Preferred: true})
			if !errors.Is(err, lease.ErrNotAcquired) {
				e.t.Fatalf("a preferred Acquire of a held key = %v, want ErrNotAcquired", err)
			}
			r := e.inspect(key)
			if r.Preferred != "newer" || !r.Held || r.Owner != "leader" || r.Token != a.Token {
				e.t.Fatalf("Inspect after a preferred attempt = %+v, want held by leader (token %d), preferred newer", r, a.Token)
			}
			if err := e.b.Renew(e.ctx(), a, longTTL); err != nil {
				e.t.Fatalf("the holder's Renew with a preferred candidate waiting: %v", err)
			}
			// The holder hands off to it; its grant clears the mark.
			t := e.handOff(a, longTTL, "newer")
			tok, err := e.b.Acquire(e.ctx(), lease.AcquireRequest{Key: key, Owner: "newer", Nonce: nonce, TTL: longTTL, Preferred: true})
			if err != nil || tok != t {
				e.t.Fatalf("the preferred candidate's Acquire = %d, %v; want the offered token %d", tok, err, t)
			}
			if r := e.inspect(key); r.Preferred != "" || r.Owner != "newer" {
				e.t.Fatalf("Inspect after the preferred candidate's grant = %+v, want it holding and no preferred candidate", r)
			}
		}},
		{"Preferred/Lapses", func(e *env) {
			e.handOffer()
			key := e.key("k")
			e.acquire(key, "leader")
			_, err := e.b.Acquire(e.ctx(), lease.AcquireRequest{Key: key, Owner: "newer", Nonce: e.nonce(), TTL: e.s.TTL, Preferred: true})
			if !errors.Is(err, lease.ErrNotAcquired) {
				e.t.Fatal(err)
			}
			e.expire(e.s.TTL)
			if r := e.inspect(key); r.Preferred != "" {
				e.t.Fatalf("Inspect after the preferred request's TTL = %+v, want no preferred candidate", r)
			}
		}},
	}
}
