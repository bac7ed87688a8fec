package telemetry

import (
	"fmt"
	"testing"
	"time"

	"github.com/golib/lease/lease"
)

// clock is a settable time for a Translator.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// countHeld returns the held count of each key label of kind lease.
func countHeld(t *Translator) map[string]int {
	n := map[string]int{}
	t.Held(func(key, kind string, c int) {
		if kind == KindLease {
			n[key] = c
		}
	})
	return n
}

func acquired(key string, token lease.Token, remaining time.Duration) *lease.Acquired {
	return &lease.Acquired{EventInfo: lease.EventInfo{Key: key, Token: token}, Attempts: 1, Remaining: remaining}
}

func discard(Point) {}

// TestHeldEndsAtTheLocalDeadline: an acquisition that is never released
// leaves the count at its local deadline, which renewals move.
func TestHeldEndsAtTheLocalDeadline(t *testing.T) {
	c := &clock{time.Unix(1_000_000, 0)}
	tr := NewTranslator(NewKeys(func(k string) string { return k }, 0), c.now)
	tr.Lease(acquired("a", 1, 10*time.Second), discard, nil)
	tr.Lease(acquired("b", 2, 10*time.Second), discard, nil)
	if n := countHeld(tr); n["a"] != 1 || n["b"] != 1 {
		t.Fatalf("held after two acquisitions = %v", n)
	}
	c.t = c.t.Add(5 * time.Second)
	tr.Lease(&lease.Renewed{EventInfo: lease.EventInfo{Key: "a", Token: 1}, Remaining: 10 * time.Second}, discard, nil)
	c.t = c.t.Add(6 * time.Second) // b's deadline passed; a's moved
	if n := countHeld(tr); n["a"] != 1 || n["b"] != 0 || len(n) != 2 {
		t.Fatalf("held after b's deadline = %v, want a 1 and b 0", n)
	}
	c.t = c.t.Add(5 * time.Second)
	if n := countHeld(tr); n["a"] != 0 {
		t.Fatalf("held after a's deadline = %v, want a 0", n)
	}
	// A renewal after the deadline does not count it again, and a late
	// release is harmless.
	tr.Lease(&lease.Renewed{EventInfo: lease.EventInfo{Key: "a", Token: 1}, Remaining: 10 * time.Second}, discard, nil)
	tr.Lease(&lease.Released{EventInfo: lease.EventInfo{Key: "b", Token: 2}}, discard, nil)
	if n := countHeld(tr); n["a"] != 0 || n["b"] != 0 {
		t.Fatalf("held after a late renewal and release = %v", n)
	}
	if l := tr.held.Len(); l != 0 {
		t.Fatalf("%d acquisitions remembered after all ended", l)
	}
}

// TestHeldForgetsExpiredLeasesUnscraped: leases that end by expiry and are
// never counted (no scrape) are forgotten as new ones come in, so memory
// stays bounded by the leases of one lifetime.
func TestHeldForgetsExpiredLeasesUnscraped(t *testing.T) {
	c := &clock{time.Unix(1_000_000, 0)}
	tr := NewTranslator(nil, c.now)
	most := 0
	for i := range 100_000 {
		if i%10 == 0 {
			c.t = c.t.Add(time.Second)
		}
		tr.Lease(acquired(fmt.Sprint("jobs/slot/", i), lease.Token(i+1), 3*time.Second), discard, nil)
		most = max(most, tr.held.Len())
	}
	// 30 live at a time (10 a second, 3 s each); pruning at twice what is
	// left keeps at most about 2×max(live, 64).
	if most > 2*minPrune+40 {
		t.Fatalf("up to %d acquisitions remembered with 30 live", most)
	}
	if n := countHeld(tr); n[""] != 30 {
		t.Fatalf("held = %v, want 30", n)
	}
}
