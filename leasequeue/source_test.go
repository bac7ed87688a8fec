package leasequeue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

// TestSourceContract holds every source to the fencing rules of
// leasequeue.Source, on each server it supports.
func TestSourceContract(t *testing.T) {
	kinds := []struct {
		name string
		make func(testing.TB) *store
	}{
		{"memory", func(testing.TB) *store { return memoryStore(nil) }},
		{"valkey", valkeyStore},
		{"valkey-cluster", valkeyClusterStore},
		{"postgres", postgresStore},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := k.make(t)
			for _, c := range sourceCases {
				t.Run(c.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					c.run(ctx, t, s.source(t, "contract-"+c.name))
				})
			}
		})
	}
}

// snap returns a snapshot of the lease on item id of queue "q" with token.
func snap(id string, token lease.Token) lease.Snapshot {
	return lease.Snapshot{Key: "q/items/" + id, Owner: fmt.Sprintf("worker-%d", token), Token: token}
}

func mustEnqueue(ctx context.Context, t *testing.T, src source, ids ...string) {
	t.Helper()
	if _, err := src.Enqueue(ctx, ids...); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
}

func mustItem(ctx context.Context, t *testing.T, src source, id string) leasequeue.Item {
	t.Helper()
	it, err := src.Item(ctx, id)
	if err != nil {
		t.Fatalf("Item(%q): %v", id, err)
	}
	return it
}

// mustClaim claims item id of queue "q" for owner, and returns the
// claim's snapshot; want is the attempt it must begin.
func mustClaim(ctx context.Context, t *testing.T, src source, owner, id string, want int) lease.Snapshot {
	t.Helper()
	g, err := src.ClaimItem(ctx, leasequeue.ClaimRequest{KeyPrefix: "q/items/", Owner: owner, Nonce: owner + "-secret", TTL: time.Hour}, id)
	if err != nil || g.Attempt != want {
		t.Fatalf("ClaimItem(%q) for %s = %+v, %v; want attempt %d", id, owner, g, err, want)
	}
	return lease.Snapshot{Key: "q/items/" + id, Owner: owner, Token: g.Token}
}

// mustTakeOver releases the claim snap of item id and claims the item
// again for owner, as a worker whose claim expired would lose it.
func mustTakeOver(ctx context.Context, t *testing.T, src source, snap lease.Snapshot, owner, id string, want int) lease.Snapshot {
	t.Helper()
	a := lease.Acquisition{Key: snap.Key, Owner: snap.Owner, Nonce: snap.Owner + "-secret", Token: snap.Token}
	if err := src.ReleaseClaim(ctx, id, a); err != nil {
		t.Fatalf("ReleaseClaim(%q): %v", id, err)
	}
	return mustClaim(ctx, t, src, owner, id, want)
}

// ageSlack is how far a source's clock may be ahead of the test's in the
// upper bounds of claim ages: the servers of the tests run on the test's
// machine, but LEASE_VALKEY_ADDR and LEASE_POSTGRES_URL may name others.
const ageSlack = time.Second

// checkAge fails unless age is at least least and at most most (plus
// ageSlack), allowing the millisecond a source may round down.
func checkAge(t *testing.T, what string, age, least, most time.Duration) {
	t.Helper()
	if age < least-time.Millisecond || age > most+ageSlack {
		t.Errorf("%s: Age = %v; want between %v and %v (+%v)", what, age, least, most, ageSlack)
	}
}

var sourceCases = []struct {
	name string
	run  func(ctx context.Context, t *testing.T, src source)
}{
	{"claim-reports-the-age", func(ctx context.Context, t *testing.T, src source) {
		// The first attempt's age runs from Enqueue; the retry's from the
		// end of its delay, not from Enqueue. Each bound is causal: the
		// source measured between the calls around it.
		const wait, delay, retryWait = 1500 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond
		r := leasequeue.ClaimRequest{KeyPrefix: "q/items/", Owner: "w1", Nonce: "n1", TTL: time.Hour}
		before := time.Now()
		mustEnqueue(ctx, t, src, "a")
		time.Sleep(wait)
		g, err := src.ClaimItem(ctx, r, "a")
		if err != nil || g.Attempt != 1 {
			t.Fatalf("ClaimItem = %+v, %v; want attempt 1", g, err)
		}
		checkAge(t, "first attempt", g.Age, wait, time.Since(before))
		failing := time.Now()
		first := lease.Snapshot{Key: "q/items/a", Owner: "w1", Token: g.Token}
		if err := src.Fail(ctx, first, "a", leasequeue.Failure{Err: errors.New("again"), RetryAfter: delay}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(retryWait)
		g, err = src.ClaimItem(ctx, r, "a")
		if err != nil || g.Attempt != 2 {
			t.Fatalf("second ClaimItem = %+v, %v; want attempt 2", g, err)
		}
		checkAge(t, "retry", g.Age, retryWait-delay, time.Since(failing)-delay)
	}},
	{"complete-is-fenced", func(ctx context.Context, t *testing.T, src source) {
		mustEnqueue(ctx, t, src, "a")
		if it := mustItem(ctx, t, src, "a"); it.State != leasequeue.Pending || it.Attempts != 0 {
			t.Fatalf("new item: %+v", it)
		}
		old := mustClaim(ctx, t, src, "w1", "a", 1)
		cur := mustTakeOver(ctx, t, src, old, "w2", "a", 2)
		if cur.Token <= old.Token {
			t.Fatalf("token of the second claim %d; want above %d", cur.Token, old.Token)
		}
		if err := src.Complete(ctx, old, "a"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Complete by the old claim = %v; want fence.ErrStale", err)
		}
		if err := src.Fail(ctx, old, "a", leasequeue.Failure{Err: errors.New("x"), Dead: true}); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Fail by the old claim = %v; want fence.ErrStale", err)
		}
		want := leasequeue.Item{ID: "a", State: leasequeue.Running, Attempts: 2, FenceKey: "q/items/a", Token: cur.Token, Owner: "w2"}
		if it := mustItem(ctx, t, src, "a"); it != want {
			t.Fatalf("after refused writes: %+v; want %+v", it, want)
		}
		if err := src.Complete(ctx, cur, "a"); err != nil {
			t.Fatalf("Complete by the new claim = %v", err)
		}
		if it := mustItem(ctx, t, src, "a"); it.State != leasequeue.Done || it.Token != cur.Token {
			t.Fatalf("after Complete: %+v", it)
		}
		if err := src.Complete(ctx, cur, "a"); !errors.Is(err, leasequeue.ErrFinished) {
			t.Fatalf("second Complete = %v; want ErrFinished", err)
		}
		r := leasequeue.ClaimRequest{KeyPrefix: "q/items/", Owner: "w3", Nonce: "n3", TTL: time.Hour}
		if _, err := src.ClaimItem(ctx, r, "a"); !errors.Is(err, leasequeue.ErrFinished) {
			t.Fatalf("ClaimItem of a done item = %v; want ErrFinished", err)
		}
		if gs, err := src.ClaimNext(ctx, r, 10); err != nil || len(gs) != 0 {
			t.Fatalf("ClaimNext hands out a done item: %+v, %v", gs, err)
		}
	}},
	{"fail-retries-then-buries", func(ctx context.Context, t *testing.T, src source) {
		mustEnqueue(ctx, t, src, "a")
		first := mustClaim(ctx, t, src, "w1", "a", 1)
		if err := src.Fail(ctx, first, "a", leasequeue.Failure{Err: errors.New("boom"), RetryAfter: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if it := mustItem(ctx, t, src, "a"); it.State != leasequeue.Pending || it.LastError != "boom" || it.Attempts != 1 {
			t.Fatalf("after Fail: %+v", it)
		}
		r := leasequeue.ClaimRequest{KeyPrefix: "q/items/", Owner: "w9", Nonce: "n9", TTL: time.Hour}
		if gs, err := src.ClaimNext(ctx, r, 10); err != nil || len(gs) != 0 {
			t.Fatalf("ClaimNext within RetryAfter = %+v, %v; want none", gs, err)
		}
		if err := src.Complete(ctx, first, "a"); err == nil || errors.Is(err, leasequeue.ErrFinished) {
			t.Fatalf("Complete of a pending item = %v; want a not-running error", err)
		}
		second := mustClaim(ctx, t, src, "w2", "a", 2) // a pending item, whatever its retry time
		if err := src.Fail(ctx, second, "a", leasequeue.Failure{Err: errors.New("again"), Dead: true}); err != nil {
			t.Fatal(err)
		}
		if it := mustItem(ctx, t, src, "a"); it.State != leasequeue.Dead || it.LastError != "again" {
			t.Fatalf("after a dead Fail: %+v", it)
		}
		if _, err := src.ClaimItem(ctx, r, "a"); !errors.Is(err, leasequeue.ErrFinished) {
			t.Fatalf("ClaimItem of a dead item = %v; want ErrFinished", err)
		}
	}},
	{"unknown-items", func(ctx context.Context, t *testing.T, src source) {
		r := leasequeue.ClaimRequest{KeyPrefix: "q/items/", Owner: "w1", Nonce: "n1", TTL: time.Hour}
		if _, err := src.ClaimItem(ctx, r, "nope"); !errors.Is(err, leasequeue.ErrNotFound) {
			t.Fatalf("ClaimItem of an unknown item = %v; want ErrNotFound", err)
		}
		if err := src.Complete(ctx, snap("nope", 1), "nope"); !errors.Is(err, leasequeue.ErrNotFound) {
			t.Fatalf("Complete of an unknown item = %v; want ErrNotFound", err)
		}
		if _, err := src.Item(ctx, "nope"); !errors.Is(err, leasequeue.ErrNotFound) {
			t.Fatalf("Item of an unknown item = %v; want ErrNotFound", err)
		}
	}},
}
