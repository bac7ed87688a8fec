package leasescheduler

import (
	"testing"
	"time"

	"github.com/golib/lease/lease"
)

// TestSlotPolicyIsValidForEveryTTL: a slot's lease is never renewed and
// leaves RenewEvery at its default; its policy still passes NewPolicy for
// every TTL a slot can get (MinTTL to MaxTTL) and every OperationTimeout
// of the run's policy, and its OperationTimeout is bounded by both.
func TestSlotPolicyIsValidForEveryTTL(t *testing.T) {
	var ttls []time.Duration
	for ttl := lease.MinTTL; ttl < lease.MaxTTL; ttl = ttl*3/2 + 1 {
		ttls = append(ttls, ttl)
	}
	ttls = append(ttls, lease.MaxTTL)
	for _, ttl := range ttls {
		for _, op := range []time.Duration{time.Nanosecond, time.Millisecond, time.Second, 5 * time.Second, lease.MaxTTL} {
			p, err := slotPolicy(ttl, op)
			if err != nil {
				t.Fatalf("slotPolicy(%v, %v): %v", ttl, op, err)
			}
			o := p.Options()
			if o.TTL != ttl || o.OperationTimeout > op || o.OperationTimeout > ttl/5 {
				t.Fatalf("slotPolicy(%v, %v) = %v", ttl, op, p)
			}
		}
	}
}
