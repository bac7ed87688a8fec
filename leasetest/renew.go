package leasetest

import (
	"errors"

	"github.com/golib/lease/lease"
)

func renewCases() []testCase {
	return []testCase{
		{"Renew/KeepsTokenAndExtends", func(e *env) {
			key := e.key("k")
			a := e.acquireShort(key, "owner")
			e.wait(e.s.TTL / 2)
			before := e.inspect(key).Remaining
			if err := e.b.Renew(e.ctx(), a, e.s.TTL); err != nil {
				e.t.Fatalf("Renew: %v", err)
			}
			r := e.inspect(key)
			if r.Token != a.Token || !r.Held {
				e.t.Fatalf("after Renew, Inspect = %+v; want held with the same token %d", r, a.Token)
			}
			if r.Remaining <= before || r.Remaining > e.s.TTL {
				e.t.Fatalf("after Renew, remaining %v; want more than before (%v) and at most the TTL %v", r.Remaining, before, e.s.TTL)
			}
			// Past the original expiry the lease is still held.
			e.wait(e.s.TTL*2/3 + 1)
			e.mustHold(a)
		}},
		{"Renew/ByAnotherAcquisitionOfTheSameOwner", func(e *env) {
			key := e.key("k")
			a := e.acquire(key, "same-owner")
			forged := a
			forged.Nonce = e.nonce()
			e.mustLose("Renew with another acquisition's secret", e.b.Renew(e.ctx(), forged, longTTL), lease.Superseded)
			e.mustLose("Release with another acquisition's secret", e.b.Release(e.ctx(), forged), lease.Superseded)
			forged.Token = 0
			e.mustLose("Release by another secret and no token", e.b.Release(e.ctx(), forged), lease.Superseded)
			e.mustHold(a)
		}},
		{"Renew/WrongToken", func(e *env) {
			key := e.key("k")
			a := e.acquire(key, "owner")
			wrong := a
			wrong.Token = a.Token + 1
			if err := e.b.Renew(e.ctx(), wrong, longTTL); !errors.Is(err, lease.ErrLost) {
				e.t.Fatalf("Renew with the wrong token = %v, want ErrLost", err)
			}
			e.mustHold(a)
		}},
		{"Renew/KeyNeverAcquired", func(e *env) {
			// A key the backend holds nothing for (never acquired, or
			// its record lost with the data): renew and release are
			// refused as a lost record, and write no record.
			key := e.key("never")
			a := lease.Acquisition{Key: key, Owner: "owner", Nonce: e.nonce(), Token: 1}
			e.mustLose("Renew of a key never acquired", e.b.Renew(e.ctx(), a, e.s.TTL), lease.RecordLost)
			e.mustLose("Release of a key never acquired", e.b.Release(e.ctx(), a), lease.RecordLost)
			a.Token = 0
			e.mustLose("Release by nonce alone of a key never acquired", e.b.Release(e.ctx(), a), lease.RecordLost)
			if r := e.inspect(key); r.Held || r.Token != 0 {
				e.t.Fatalf("after a refused renew and release of a key never acquired, Inspect = %+v; want free, token 0", r)
			}
		}},
		{"Renew/AfterExpiry", func(e *env) {
			key := e.key("k")
			a := e.acquireShort(key, "owner")
			e.expire(e.s.TTL)
			e.mustLose("Renew after expiry", e.b.Renew(e.ctx(), a, e.s.TTL), lease.Expired)
			e.mustBeFree(key)
			b := e.acquire(key, "other")
			e.mustLose("Renew after expiry and takeover", e.b.Renew(e.ctx(), a, e.s.TTL), lease.Superseded)
			e.mustHold(b)
		}},
		{"Renew/Handle", func(e *env) {
			key := e.key("k")
			h, err := e.client("owner").TryAcquire(e.ctx(), key, e.policy())
			if err != nil {
				e.t.Fatal(err)
			}
			d0 := h.Deadline()
			e.wait(10)
			if err := h.Renew(e.ctx()); err != nil {
				e.t.Fatalf("Handle.Renew: %v", err)
			}
			if h.Deadline().Before(d0) {
				e.t.Fatalf("Renew moved the deadline back from %v to %v", d0, h.Deadline())
			}
			if err := h.Validate(e.ctx()); err != nil {
				e.t.Fatalf("Validate of the holder: %v", err)
			}
			if err := h.Release(e.ctx()); err != nil {
				e.t.Fatalf("Release: %v", err)
			}
			err = h.Renew(e.ctx())
			if !errors.Is(err, lease.ErrLost) || !errors.Is(err, lease.ErrReleased) {
				e.t.Fatalf("Renew after Release = %v, want ErrLost and ErrReleased", err)
			}
			e.mustLose("Validate after Release", h.Validate(e.ctx()), lease.Expired)
		}},
		{"Renew/ValidateAfterTakeover", func(e *env) {
			key := e.key("k")
			p := e.policyWith(lease.PolicyOptions{TTL: e.s.TTL, OperationTimeout: e.s.TTL / 4, RenewEvery: e.s.TTL / 10})
			h, err := e.client("first").TryAcquire(e.ctx(), key, p)
			if err != nil {
				e.t.Fatal(err)
			}
			e.expire(e.s.TTL)
			h2, err := e.client("second").TryAcquire(e.ctx(), key, e.policy())
			if err != nil {
				e.t.Fatalf("Acquire after expiry: %v", err)
			}
			e.mustLose("Validate after takeover", h.Validate(e.ctx()), lease.Superseded)
			e.mustLose("Renew after takeover", h.Renew(e.ctx()), lease.Superseded)
			if err := h2.Validate(e.ctx()); err != nil {
				e.t.Fatalf("Validate of the new holder: %v", err)
			}
		}},
	}
}
