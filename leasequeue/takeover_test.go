package leasequeue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasetest"
)

// TestTakenOverClaimCannotComplete: worker A claims an item and then
// stops still, as a paused process does; its lease expires on the
// backend's clock and worker B claims the item. When A wakes up and
// completes, the fence refuses it, and the item keeps B's state. A worker
// that knows it lost its lease is refused before it writes at all.
func TestTakenOverClaimCannotComplete(t *testing.T) {
	forEachSource(t, func(t *testing.T, s *store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		src := s.source(t, "takeover")
		mustEnqueue(ctx, t, src, "paused", "cut-off")
		p := loadedPolicy(t, 2*time.Second)
		o := leasequeue.Options{Name: "takeover", Policy: p}
		b := newQueue(t, s, src, "worker-b", o)

		// A's clock stands still: its renewer never runs and its local
		// deadline never passes, as in a paused process.
		frozen := leasetest.NewFakeClock(time.Now())
		a := newQueueOnClock(t, s, src, "worker-a", frozen, o)
		// A request that provably was not sent (a pool that could not
		// connect within OperationTimeout on a loaded machine) is
		// tried again; any other error fails the test.
		var ca *leasequeue.Claim
		var err error
		for try := 0; ; try++ {
			ca, err = a.Claim(ctx, "paused")
			if err == nil || try == 2 || !strings.Contains(err.Error(), "request not sent") {
				break
			}
			t.Logf("claim not sent, trying again: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer ca.Release(ctx) // stops its renewer in any case
		cb := claimOnceFree(ctx, t, b, "paused")
		if cb.Snapshot().Token <= ca.Snapshot().Token {
			t.Fatalf("B's token %d is not above A's %d", cb.Snapshot().Token, ca.Snapshot().Token)
		}

		err = ca.Complete(ctx)
		var stale *fence.StaleError
		if !errors.As(err, &stale) || stale.Current != cb.Snapshot().Token {
			t.Fatalf("A's Complete after the takeover = %v; want a *fence.StaleError naming B's token", err)
		}
		want := leasequeue.Item{ID: "paused", State: leasequeue.Running, Attempts: 2,
			FenceKey: "takeover/items/paused", Token: cb.Snapshot().Token, Owner: "worker-b"}
		if it := mustItem(ctx, t, src, "paused"); it != want {
			t.Fatalf("item after A's refused completion: %+v; want B's %+v", it, want)
		}
		if err := cb.Complete(ctx); err != nil {
			t.Fatalf("B's Complete = %v", err)
		}
		if it := mustItem(ctx, t, src, "paused"); it.State != leasequeue.Done || it.Owner != "worker-b" {
			t.Fatalf("item after B's completion: %+v", it)
		}

		// A worker cut off from the backend loses its lease at its local
		// deadline, and then writes nothing.
		cut := &cutOff{Backend: s.backend(t)}
		// The claims live in the source: cut it off too.
		csrc := leasequeue.CutSource(src, &cut.cut, errCut)
		seen := &events{}
		oc := o
		oc.Observer = seen
		c, err := leasequeue.New(newClient(t, cut, "worker-c", nil), csrc, oc)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := c.Claim(ctx, "cut-off")
		if err != nil {
			t.Fatal(err)
		}
		cut.cut.Store(true)
		select {
		case <-cc.Context().Done():
		case <-ctx.Done():
			t.Fatal("the cut-off claim was never lost")
		}
		<-cc.Lost()
		if context.Cause(cc.Context()) == nil || !errors.Is(context.Cause(cc.Context()), lease.ErrLost) {
			t.Fatalf("claim context's cause = %v; want lease.ErrLost", context.Cause(cc.Context()))
		}
		// The queue reports the loss as the claim's Lost event (on a
		// Claimer before Lost closes, otherwise soon after).
		for len(all[*leasequeue.Lost](seen)) == 0 {
			select {
			case <-ctx.Done():
				t.Fatal("no Lost event for the cut-off claim")
			case <-time.After(10 * time.Millisecond):
			}
		}
		if l := all[*leasequeue.Lost](seen); len(l) != 1 || l[0].ID != "cut-off" || !errors.Is(l[0].Err, lease.ErrLost) {
			t.Fatalf("Lost events %+v; want one for cut-off matching lease.ErrLost", l)
		}
		if err := cc.Fail(ctx, errors.New("too late")); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("Fail of a lost claim = %v; want lease.ErrLost", err)
		}
		if it := mustItem(ctx, t, src, "cut-off"); it.State != leasequeue.Running || it.LastError != "" {
			t.Fatalf("item after the lost claim's Fail: %+v; want it untouched", it)
		}
		cb = claimOnceFree(ctx, t, b, "cut-off")
		if err := cb.Complete(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// claimOnceFree claims id with q as soon as its lease is free.
func claimOnceFree(ctx context.Context, t *testing.T, q *leasequeue.Queue, id string) *leasequeue.Claim {
	t.Helper()
	for {
		c, err := q.Claim(ctx, id)
		switch {
		case err == nil:
			return c
		case !errors.Is(err, lease.ErrNotAcquired):
			t.Fatalf("Claim(%q) = %v", id, err)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("Claim(%q): the lease never came free", id)
		}
	}
}
