package leasetest

import (
	"time"

	"github.com/golib/lease/lease"
)

func expiryCases() []testCase {
	return []testCase{
		{"Expiry/DecidedByTheBackend", func(e *env) {
			key := e.key("k")
			// The holder's clock is frozen: it believes it holds the lease
			// forever. Only the backend's clock may end it.
			frozen := NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			p := e.policyWith(lease.PolicyOptions{TTL: e.s.TTL, OperationTimeout: e.s.TTL / 4, RenewEvery: e.s.TTL / 10})
			h, err := e.clientOn(e.b, "frozen", frozen).TryAcquire(e.ctx(), key, p)
			if err != nil {
				e.t.Fatal(err)
			}
			e.expire(e.s.TTL)
			if !frozen.Now().Before(h.Deadline()) {
				e.t.Fatal("the frozen clock moved")
			}
			e.mustBeFree(key)
			h2, err := e.client("other").TryAcquire(e.ctx(), key, e.policy())
			if err != nil {
				e.t.Fatalf("Acquire after the backend expired the lease: %v", err)
			}
			e.mustLose("Validate by the frozen holder", h.Validate(e.ctx()), lease.Superseded)
			if h2.Token() <= h.Token() {
				e.t.Fatalf("token %d after expiry, want above %d", h2.Token(), h.Token())
			}
		}},
		{"Expiry/RemainingCountsDown", func(e *env) {
			key := e.key("k")
			e.acquire(key, "owner")
			r1 := e.inspect(key)
			e.wait(100 * time.Millisecond)
			r2 := e.inspect(key)
			if r2.Remaining >= r1.Remaining {
				e.t.Fatalf("remaining went from %v to %v over 100ms, want it to shrink", r1.Remaining, r2.Remaining)
			}
		}},
		{"Expiry/ManagedKeepsLeaseBeyondTTL", func(e *env) {
			key := e.key("k")
			p := e.policyWith(lease.PolicyOptions{TTL: e.s.TTL, OperationTimeout: e.s.TTL / 4, RenewEvery: e.s.TTL / 10})
			h, err := e.client("managed").TryAcquire(e.ctx(), key, p)
			if err != nil {
				e.t.Fatal(err)
			}
			m, err := h.StartManaged(e.ctx())
			if err != nil {
				e.t.Fatalf("StartManaged: %v", err)
			}
			for range 30 { // three TTLs
				if e.s.Clock != nil {
					_ = e.s.Clock.WaitForTimers(e.ctx(), 1)
				}
				e.wait(e.s.TTL / 10)
			}
			select {
			case <-m.Lost():
				e.t.Fatalf("managed lease lost: %v", m.Err())
			default:
			}
			e.mustHold(lease.Acquisition{Key: key, Owner: "managed", Token: h.Token()})
			if err := h.Release(e.ctx()); err != nil {
				e.t.Fatalf("Release: %v", err)
			}
			if err := m.Stop(e.ctx()); err != nil {
				e.t.Fatalf("Stop after Release: %v", err)
			}
			e.mustBeFree(key)
		}},
	}
}
