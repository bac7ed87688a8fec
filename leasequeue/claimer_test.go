package leasequeue_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasetest"
)

// TestClaimerContract holds the ready-made Claimers to the rules of
// leasequeue.Claimer, on the system clock: claims are exclusive while
// current, their tokens only grow, renew and release apply only to the
// current claim, and Complete and Fail end it.
func TestClaimerContract(t *testing.T) {
	kinds := []struct {
		name string
		make func(testing.TB) *store
	}{
		{"memory", func(testing.TB) *store { return memoryStore(nil) }},
		{"postgres", postgresStore},
		{"valkey", valkeyStore},
		{"valkey-cluster", valkeyClusterStore},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			src := k.make(t).source(t, "claimer")
			c := src.(leasequeue.Claimer)
			const prefix = "claimer/items/"
			req := func(owner, nonce string, ttl time.Duration) leasequeue.ClaimRequest {
				return leasequeue.ClaimRequest{KeyPrefix: prefix, Owner: owner, Nonce: nonce, TTL: ttl}
			}
			acq := func(g leasequeue.Granted, owner, nonce string) lease.Acquisition {
				return lease.Acquisition{Key: prefix + g.ID, Owner: owner, Nonce: nonce, Token: g.Token}
			}
			mustEnqueue(ctx, t, src, "a", "b")

			// Nothing ready beyond the two items; each is claimed once.
			gs, err := c.ClaimNext(ctx, req("w1", "n1", time.Minute), 5)
			if err != nil || len(gs) != 2 || gs[0].Attempt != 1 || gs[1].Attempt != 1 {
				t.Fatalf("ClaimNext = %+v, %v; want both items at attempt 1", gs, err)
			}
			if more, err := c.ClaimNext(ctx, req("w2", "n2", time.Minute), 5); err != nil || len(more) != 0 {
				t.Fatalf("ClaimNext of held items = %+v, %v; want none", more, err)
			}
			a := gs[0]
			if a.ID != "a" {
				a = gs[1]
			}
			var na *lease.NotAcquiredError
			if _, err := c.ClaimItem(ctx, req("w2", "n2", time.Minute), "a"); !errors.As(err, &na) || na.Holder != "w1" || na.Token != a.Token || na.Remaining <= 0 {
				t.Fatalf("ClaimItem of a held item = %v; want a *lease.NotAcquiredError naming w1, token %d", err, a.Token)
			}
			if _, err := c.ClaimItem(ctx, req("w2", "n2", time.Minute), "none"); !errors.Is(err, leasequeue.ErrNotFound) {
				t.Fatalf("ClaimItem of an unknown item = %v; want ErrNotFound", err)
			}
			if r, err := c.InspectClaim(ctx, "a"); err != nil || !r.Held || r.Owner != "w1" || r.Token != a.Token {
				t.Fatalf("InspectClaim = %+v, %v; want held by w1 with token %d", r, err, a.Token)
			}

			// Renew and release apply to the current claim only.
			if err := c.RenewClaim(ctx, "a", acq(a, "w1", "wrong"), time.Minute); !errors.Is(err, lease.ErrLost) {
				t.Fatalf("RenewClaim under a wrong secret = %v; want ErrLost", err)
			}
			if err := c.RenewClaim(ctx, "a", acq(a, "w1", "n1"), time.Minute); err != nil {
				t.Fatalf("RenewClaim = %v", err)
			}
			if err := c.ReleaseClaim(ctx, "a", acq(a, "w1", "n1")); err != nil {
				t.Fatalf("ReleaseClaim = %v", err)
			}
			var lost *lease.LostError
			if err := c.RenewClaim(ctx, "a", acq(a, "w1", "n1"), time.Minute); !errors.As(err, &lost) || lost.Reason != lease.Expired {
				t.Fatalf("RenewClaim after ReleaseClaim = %v; want a *lease.LostError, Expired", err)
			}
			if r, err := c.InspectClaim(ctx, "a"); err != nil || r.Held {
				t.Fatalf("InspectClaim after ReleaseClaim = %+v, %v; want free", r, err)
			}

			// A released item is claimed again at once, with a higher
			// token, its attempt counted; the old claim is superseded.
			a2, err := c.ClaimItem(ctx, req("w2", "n2", time.Minute), "a")
			if err != nil || a2.Token <= a.Token || a2.Attempt != 2 {
				t.Fatalf("ClaimItem after release = %+v, %v; want a token above %d, attempt 2", a2, err, a.Token)
			}
			if err := c.RenewClaim(ctx, "a", acq(a, "w1", "n1"), time.Minute); !errors.As(err, &lost) || lost.Reason != lease.Superseded {
				t.Fatalf("RenewClaim of the superseded claim = %v; want a *lease.LostError, Superseded", err)
			}
			if err := src.Complete(ctx, lease.Snapshot{Key: prefix + "a", Owner: "w1", Token: a.Token}, "a"); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("Complete under the superseded claim = %v; want fence.ErrStale", err)
			}

			// Complete ends the claim: no renewal, no release, no claim.
			if err := src.Complete(ctx, lease.Snapshot{Key: prefix + "a", Owner: "w2", Token: a2.Token}, "a"); err != nil {
				t.Fatal(err)
			}
			if err := c.RenewClaim(ctx, "a", acq(a2, "w2", "n2"), time.Minute); !errors.Is(err, lease.ErrLost) {
				t.Fatalf("RenewClaim of a completed item = %v; want ErrLost", err)
			}
			if err := c.ReleaseClaim(ctx, "a", acq(a2, "w2", "n2")); !errors.Is(err, lease.ErrLost) {
				t.Fatalf("ReleaseClaim of a completed item = %v; want ErrLost", err)
			}
			if _, err := c.ClaimItem(ctx, req("w3", "n3", time.Minute), "a"); !errors.Is(err, leasequeue.ErrFinished) {
				t.Fatalf("ClaimItem of a done item = %v; want ErrFinished", err)
			}

			// A claim that expires on the source's clock is taken over by
			// ClaimNext, first, with a higher token.
			b := gs[0]
			if b.ID != "b" {
				b = gs[1]
			}
			if err := c.RenewClaim(ctx, "b", acq(b, "w1", "n1"), 50*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, "b's claim expired", func() bool {
				r, err := c.InspectClaim(ctx, "b")
				if err != nil {
					t.Fatalf("InspectClaim(b) = %v", err)
				}
				return !r.Held
			})
			mustEnqueue(ctx, t, src, "c")
			taken, err := c.ClaimNext(ctx, req("w4", "n4", time.Minute), 1)
			if err != nil || len(taken) != 1 || taken[0].ID != "b" || taken[0].Token <= b.Token || taken[0].Attempt != 2 {
				t.Fatalf("ClaimNext after b's claim expired = %+v, %v; want b first, a token above %d, attempt 2", taken, err, b.Token)
			}
			if err := c.RenewClaim(ctx, "b", acq(b, "w1", "n1"), time.Minute); !errors.As(err, &lost) || lost.Reason != lease.Superseded {
				t.Fatalf("RenewClaim of the expired, taken-over claim = %v; want Superseded", err)
			}
		})
	}
}

// TestMemoryClaimNextInDueOrder: ClaimNext hands out ready items in the
// order they became due, as the Source contract says, not in the order
// they were enqueued.
func TestMemoryClaimNextInDueOrder(t *testing.T) {
	ctx := context.Background()
	clock := leasetest.NewFakeClock(time.Unix(1_700_000_000, 0))
	src := leasequeue.NewMemorySource(leasequeue.MemoryOptions{Clock: clock})
	src.Enqueue("a", "b", "c")
	r := leasequeue.ClaimRequest{KeyPrefix: "q/", Owner: "w", Nonce: "n", TTL: time.Minute}
	for id, retry := range map[string]time.Duration{"a": 10 * time.Second, "b": 5 * time.Second} {
		g, err := src.ClaimItem(ctx, r, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := src.Fail(ctx, lease.Snapshot{Key: "q/" + id, Owner: "w", Token: g.Token}, id, leasequeue.Failure{RetryAfter: retry}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(11 * time.Second) // all three due: c at once, b after 5s, a after 10s
	var got []string
	for _, n := range []int{2, 1, 0} {
		gs, err := src.ClaimNext(ctx, r, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			got = append(got, g.ID)
		}
	}
	if want := []string{"c", "b", "a"}; !slices.Equal(got, want) {
		t.Fatalf("ClaimNext handed out %q, want %q (the order the items became due)", got, want)
	}
}
