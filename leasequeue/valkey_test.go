package leasequeue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

// TestValkeyProducersPushToTheList: a producer that is not a Go program
// enqueues with HSETNX and RPUSH.
func TestValkeyProducersPushToTheList(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := valkeyClient(t, []string{testserver.Valkey(t).Addr()})
	src, err := leasequeue.NewValkeySource(c, "pushed", leasequeue.ValkeyOptions{Prefix: fmt.Sprintf("push%d-%d:", time.Now().UnixNano()%1e6, prefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"HSETNX", src.ItemKey("x", "item"), "state", "pending"},
		{"RPUSH", src.ReadyKey(), "x"},
	} {
		if err := c.Do(ctx, c.B().Arbitrary(cmd...).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	gs, err := src.ClaimNext(ctx, leasequeue.ClaimRequest{KeyPrefix: "q/items/", Owner: "w", Nonce: "n", TTL: time.Minute}, 10)
	if err != nil || len(gs) != 1 || gs[0].ID != "x" || gs[0].Attempt != 1 {
		t.Fatalf("ClaimNext = %+v, %v; want x at attempt 1", gs, err)
	}
}

// TestValkeyCompleteClaimWith: commands applied with the completion, in
// the item's slot; a command outside it is refused before any I/O.
func TestValkeyCompleteClaimWith(t *testing.T) {
	t.Parallel()
	s := valkeyStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := s.source(t, "with").(*leasequeue.ValkeySource)
	mustEnqueue(ctx, t, src, "a", "b")
	q := newQueue(t, s, src, "w", leasequeue.Options{Name: "with", Policy: loadedPolicy(t, 2*time.Second)})
	c, err := q.Claim(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := src.CompleteClaimWith(ctx, c, fencevalkey.Set(src.ItemKey("a", "receipt"), "sent", fencevalkey.SetOptions{})); err != nil {
		t.Fatal(err)
	}
	shared := valkeyClient(t, []string{testserver.Valkey(t).Addr()})
	if v, err := shared.Do(ctx, shared.B().Get().Key(src.ItemKey("a", "receipt")).Build()).ToString(); err != nil || v != "sent" {
		t.Fatalf("receipt = %q, %v", v, err)
	}
	if it := mustItem(ctx, t, src, "a"); it.State != leasequeue.Done {
		t.Fatalf("after CompleteClaimWith: %+v", it)
	}

	c, err = q.Claim(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	err = src.CompleteClaimWith(ctx, c, fencevalkey.Set("elsewhere", "x", fencevalkey.SetOptions{}))
	if !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("CompleteClaimWith with a key in another slot = %v; want fence.ErrInvalid", err)
	}
	if it := mustItem(ctx, t, src, "b"); it.State != leasequeue.Running {
		t.Fatalf("after a refused CompleteClaimWith: %+v; want it still running", it)
	}
}

// TestValkeyClaimNextKeys: the claim script names the items it picks
// itself, escaping IDs as package keyspace does, and records the lease
// key Queue.Key gives, for IDs holding every reserved byte; on a cluster
// too, where a key outside the queue's slot would be refused.
func TestValkeyClaimNextKeys(t *testing.T) {
	for _, mk := range []func(testing.TB) *store{valkeyStore, valkeyClusterStore} {
		s := mk(t)
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			src := s.source(t, "k/{eys}%").(*leasequeue.ValkeySource)
			ids := []string{"plain", "a/b", "{x}", "100%", "%2F", "/{%}/", "a:b"}
			mustEnqueue(ctx, t, src, ids...)
			q := newQueue(t, s, src, "w", leasequeue.Options{Name: "k/{eys}%", Policy: loadedPolicy(t, time.Minute)})
			gs, err := src.ClaimNext(ctx, leasequeue.ClaimRequest{
				KeyPrefix: strings.TrimSuffix(q.Key("x"), "x"), Owner: "w", Nonce: "n", TTL: time.Minute}, len(ids))
			if err != nil || len(gs) != len(ids) {
				t.Fatalf("ClaimNext = %+v, %v; want %d items", gs, err, len(ids))
			}
			for _, g := range gs {
				if it := mustItem(ctx, t, src, g.ID); it.FenceKey != q.Key(g.ID) || it.Token != g.Token || it.State != leasequeue.Running || it.Attempts != 1 {
					t.Errorf("item %q: %+v; want running under %q, token %d, attempt 1", g.ID, it, q.Key(g.ID), g.Token)
				}
			}
		})
	}
}

// TestValkeyCompleteClaimWithIsFenced: the writes of CompleteWith under a
// claim that was taken over apply neither the completion nor the user's
// commands.
func TestValkeyCompleteClaimWithIsFenced(t *testing.T) {
	t.Parallel()
	s := valkeyStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := s.source(t, "fenced").(*leasequeue.ValkeySource)
	mustEnqueue(ctx, t, src, "a")
	r := func(nonce string) leasequeue.ClaimRequest {
		return leasequeue.ClaimRequest{KeyPrefix: "fenced/items/", Owner: "w-" + nonce, Nonce: nonce, TTL: time.Minute}
	}
	old, err := src.ClaimItem(ctx, r("1"), "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := src.ReleaseClaim(ctx, "a", lease.Acquisition{Key: "fenced/items/a", Owner: "w-1", Nonce: "1", Token: old.Token}); err != nil {
		t.Fatal(err)
	}
	cur, err := src.ClaimItem(ctx, r("2"), "a")
	if err != nil {
		t.Fatal(err)
	}
	receipt := src.ItemKey("a", "receipt")
	err = src.CompleteWith(ctx, lease.Snapshot{Key: "fenced/items/a", Owner: "w-1", Token: old.Token}, "a", fencevalkey.Set(receipt, "stale", fencevalkey.SetOptions{}))
	var stale *fence.StaleError
	if !errors.As(err, &stale) || stale.Current != cur.Token {
		t.Fatalf("CompleteWith under the taken-over claim = %v; want a *fence.StaleError at token %d", err, cur.Token)
	}
	shared := valkeyClient(t, []string{testserver.Valkey(t).Addr()})
	if err := shared.Do(ctx, shared.B().Get().Key(receipt).Build()).Error(); !valkey.IsValkeyNil(err) {
		t.Errorf("receipt after the refused CompleteWith: %v; want none", err)
	}
	if it := mustItem(ctx, t, src, "a"); it.State != leasequeue.Running || it.Owner != "w-2" {
		t.Errorf("after the refused CompleteWith: %+v; want it running under w-2", it)
	}
	if err := src.CompleteWith(ctx, lease.Snapshot{Key: "fenced/items/a", Owner: "w-2", Token: cur.Token}, "a", fencevalkey.Set(receipt, "sent", fencevalkey.SetOptions{})); err != nil {
		t.Fatal(err)
	}
	if it := mustItem(ctx, t, src, "a"); it.State != leasequeue.Done {
		t.Errorf("after CompleteWith: %+v; want done", it)
	}
	if err := src.RenewClaim(ctx, "a", lease.Acquisition{Key: "fenced/items/a", Owner: "w-2", Nonce: "2", Token: cur.Token}, time.Minute); !errors.Is(err, lease.ErrLost) {
		t.Errorf("RenewClaim after CompleteWith = %v; want ErrLost", err)
	}
}

// TestValkeySweepOfCompleteWith: an item completed with commands is
// indexed for Sweep, also when the request that indexes it was lost (the
// next claim that meets it in the due set does it), and Sweep keeps its
// fence, which also guards the commands' keys: a taken-over claim's
// CompleteWith is still refused after the item was removed.
func TestValkeySweepOfCompleteWith(t *testing.T) {
	t.Parallel()
	s := valkeyStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := s.retaining(t, "with", time.Nanosecond, time.Nanosecond).(*leasequeue.ValkeySource)
	shared := valkeyClient(t, []string{testserver.Valkey(t).Addr()})
	mustEnqueue(ctx, t, src, "a", "b")
	r := func(nonce string) leasequeue.ClaimRequest {
		return leasequeue.ClaimRequest{KeyPrefix: "with/items/", Owner: "w-" + nonce, Nonce: nonce, TTL: time.Minute}
	}
	snapOf := func(id, nonce string, g leasequeue.Granted) lease.Snapshot {
		return lease.Snapshot{Key: "with/items/" + id, Owner: "w-" + nonce, Token: g.Token}
	}
	old, err := src.ClaimItem(ctx, r("1"), "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := src.ReleaseClaim(ctx, "a", lease.Acquisition{Key: "with/items/a", Owner: "w-1", Nonce: "1", Token: old.Token}); err != nil {
		t.Fatal(err)
	}
	cur, err := src.ClaimItem(ctx, r("2"), "a")
	if err != nil {
		t.Fatal(err)
	}
	receipt := src.ItemKey("a", "receipt")
	if err := src.CompleteWith(ctx, snapOf("a", "2", cur), "a", fencevalkey.IncrBy(receipt, 1)); err != nil {
		t.Fatal(err)
	}

	// b is completed with commands too, and its indexing is lost: it
	// stays in the due set, as if the second request never arrived.
	gb, err := src.ClaimItem(ctx, r("3"), "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := src.CompleteWith(ctx, snapOf("b", "3", gb), "b", fencevalkey.IncrBy(src.ItemKey("b", "receipt"), 1)); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []valkey.Completed{
		shared.B().Zrem().Key(src.DoneKey()).Member("b").Build(),
		shared.B().Hdel().Key(src.ItemKey("b", "item")).Field("fin").Build(),
		shared.B().Zadd().Key(src.DueKey()).ScoreMember().ScoreMember(0, "b").Build(),
	} {
		if err := shared.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	if got := sweepAll(ctx, t, src, lease.SweepOptions{Limit: 10}); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Sweep removed %q; want a (b is not indexed yet)", got)
	}
	if gs, err := src.ClaimNext(ctx, r("4"), 10); err != nil || len(gs) != 0 {
		t.Fatalf("ClaimNext = %+v, %v; want nothing, and b indexed", gs, err)
	}
	time.Sleep(5 * time.Millisecond)
	if got := sweepAll(ctx, t, src, lease.SweepOptions{Limit: 10}); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("Sweep after ClaimNext met b removed %q; want b", got)
	}

	// a's item is gone, its fence is not: the taken-over claim is refused,
	// and the receipt counts one completion.
	if n, err := shared.Do(ctx, shared.B().Exists().Key(src.ItemKey("a", "item")).Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("a's item hash after Sweep: %d, %v; want it deleted", n, err)
	}
	err = src.CompleteWith(ctx, snapOf("a", "1", old), "a", fencevalkey.IncrBy(receipt, 1))
	var stale *fence.StaleError
	if !errors.As(err, &stale) || stale.Current != cur.Token {
		t.Fatalf("CompleteWith of the taken-over claim after Sweep = %v; want a *fence.StaleError at token %d", err, cur.Token)
	}
	if n, err := shared.Do(ctx, shared.B().Get().Key(receipt).Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("receipt = %d, %v; want 1", n, err)
	}
	// Enqueued again, a is a new item whose claims rise above the fence.
	if n, err := src.Enqueue(ctx, "a"); err != nil || n != 1 {
		t.Fatalf("Enqueue of the removed a = %d, %v", n, err)
	}
	again, err := src.ClaimItem(ctx, r("5"), "a")
	if err != nil || again.Token <= cur.Token || again.Attempt != 1 {
		t.Fatalf("claim of a enqueued again = %+v, %v; want attempt 1, token above %d", again, err, cur.Token)
	}
}

// TestValkeySweepOfOlderDeadItems: dead items of an older release (no
// finish time on the item) are found through the dead set and removed;
// an ID of the sets whose item is not in the set's state leaves the set,
// and the item stays.
func TestValkeySweepOfOlderDeadItems(t *testing.T) {
	t.Parallel()
	s := valkeyStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := s.retaining(t, "older", time.Hour, time.Minute).(*leasequeue.ValkeySource)
	shared := valkeyClient(t, []string{testserver.Valkey(t).Addr()})
	mustEnqueue(ctx, t, src, "old", "pending")
	c := claimer{t, src}
	c.fail(ctx, "old", leasequeue.Failure{Dead: true})
	long := time.Now().Add(-2 * time.Hour).UnixMilli()
	for _, cmd := range []valkey.Completed{
		shared.B().Hdel().Key(src.ItemKey("old", "item")).Field("fin").Build(),
		shared.B().Zadd().Key(src.DeadKey()).ScoreMember().ScoreMember(float64(long), "old").Build(),
		shared.B().Zadd().Key(src.DeadKey()).ScoreMember().ScoreMember(float64(long), "pending").Build(),
		shared.B().Zadd().Key(src.DoneKey()).ScoreMember().ScoreMember(float64(long), "pending").Build(),
	} {
		if err := shared.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if got := sweepAll(ctx, t, src, lease.SweepOptions{Limit: 10}); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("Sweep removed %q; want old", got)
	}
	checkStates(ctx, t, src, map[string]leasequeue.State{"pending": leasequeue.Pending}, "old")
	for _, set := range []string{src.DoneKey(), src.DeadKey()} {
		if n, err := shared.Do(ctx, shared.B().Zcard().Key(set).Build()).AsInt64(); err != nil || n != 0 {
			t.Errorf("%s holds %d IDs after Sweep, %v; want none", set, n, err)
		}
	}
}

// TestValkeySweepLeavesNoReadyTimes: an ID enqueued again while its item
// was done leaves nothing behind: a claim that pops it drops its ready
// time, and once Sweep removed the item, Next and Begin that meet it drop
// its due entry.
func TestValkeySweepLeavesNoReadyTimes(t *testing.T) {
	t.Parallel()
	s := valkeyStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shared := valkeyClient(t, []string{testserver.Valkey(t).Addr()})
	for _, claims := range []bool{true, false} {
		src := s.retaining(t, fmt.Sprint("again-", claims), time.Nanosecond, time.Nanosecond).(*leasequeue.ValkeySource)
		c := claimer{t, src}
		mustEnqueue(ctx, t, src, "x")
		c.complete(ctx, "x")
		// Enqueued again while done: left alone, but pushed and given a
		// ready time, as Enqueue does.
		if n, err := src.Enqueue(ctx, "x"); err != nil || n != 0 {
			t.Fatalf("Enqueue of a done item = %d, %v; want 0", n, err)
		}
		if claims {
			if gs, err := src.ClaimNext(ctx, leasequeue.ClaimRequest{KeyPrefix: pruneKeyPrefix, Owner: "w", Nonce: "n", TTL: time.Minute}, 1); err != nil || len(gs) != 0 {
				t.Fatalf("ClaimNext = %+v, %v; want nothing", gs, err)
			}
			if ok, err := shared.Do(ctx, shared.B().Hexists().Key(src.SinceKey()).Field("x").Build()).AsBool(); err != nil || ok {
				t.Errorf("x's ready time after a claim dropped it: %v, %v; want none", ok, err)
			}
		}
		time.Sleep(5 * time.Millisecond)
		if got := sweepAll(ctx, t, src, lease.SweepOptions{Limit: 10}); !slices.Equal(got, []string{"x"}) {
			t.Fatalf("Sweep removed %q; want x", got)
		}
		if !claims {
			// The ID is still in the ready list: a claim drops it.
			if gs, err := src.ClaimNext(ctx, leasequeue.ClaimRequest{KeyPrefix: pruneKeyPrefix, Owner: "w", Nonce: "n", TTL: time.Minute}, 1); err != nil || len(gs) != 0 {
				t.Fatalf("ClaimNext after the item was removed = %+v, %v; want nothing", gs, err)
			}
		}
		for _, key := range []string{src.SinceKey(), src.DueKey(), src.ReadyKey(), src.DoneKey()} {
			if n, err := shared.Do(ctx, shared.B().Exists().Key(key).Build()).AsInt64(); err != nil || n != 0 {
				t.Errorf("claims %v: %s exists (%d, %v); want it empty, so gone", claims, key, n, err)
			}
		}
	}
}
