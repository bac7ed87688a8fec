package leasequeue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/testserver"
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
	if ids, err := src.Next(ctx, 10, time.Hour); err != nil || len(ids) != 1 || ids[0] != "x" {
		t.Fatalf("Next = %q, %v; want [x]", ids, err)
	}
	mustBegin(ctx, t, src, snap("x", 1), "x", 1)
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
	if err := src.CompleteClaimWith(ctx, c, fence.Set(src.ItemKey("a", "receipt"), "sent", fence.SetOptions{})); err != nil {
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
	err = src.CompleteClaimWith(ctx, c, fence.Set("elsewhere", "x", fence.SetOptions{}))
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
	err = src.CompleteWith(ctx, lease.Snapshot{Key: "fenced/items/a", Owner: "w-1", Token: old.Token}, "a", fence.Set(receipt, "stale", fence.SetOptions{}))
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
	if err := src.CompleteWith(ctx, lease.Snapshot{Key: "fenced/items/a", Owner: "w-2", Token: cur.Token}, "a", fence.Set(receipt, "sent", fence.SetOptions{})); err != nil {
		t.Fatal(err)
	}
	if it := mustItem(ctx, t, src, "a"); it.State != leasequeue.Done {
		t.Errorf("after CompleteWith: %+v; want done", it)
	}
	if err := src.RenewClaim(ctx, "a", lease.Acquisition{Key: "fenced/items/a", Owner: "w-2", Nonce: "2", Token: cur.Token}, time.Minute); !errors.Is(err, lease.ErrLost) {
		t.Errorf("RenewClaim after CompleteWith = %v; want ErrLost", err)
	}
}
