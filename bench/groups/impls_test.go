package groups_test

import (
	"context"
	"errors"
	"testing"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/golib/lease/lease"
)

// TestImpls checks that each impl's acquisition holds the keys it claims
// to, exclusively (a contender is refused each of them), with one token
// across a set, and that its release frees them all, so that the
// benchmarks compare what they say they compare.
func TestImpls(t *testing.T) {
	ctx := context.Background()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			e := be.start(t)
			contender, err := lease.NewClient(e.client.Backend(), lease.ClientOptions{Owner: "contender"})
			if err != nil {
				t.Fatal(err)
			}
			var rc *redis.Client
			if e.valkeyAddr != "" {
				rc = redis.NewClient(&redis.Options{Addr: e.valkeyAddr})
				t.Cleanup(func() { rc.Close() })
			}
			for _, i := range impls {
				if !i.runs(e) {
					continue
				}
				t.Run(i.name, func(t *testing.T) {
					acquire := i.new(t, e)
					key := "test-" + be.name + "-" + i.name
					for round := range 2 { // a released acquisition can be taken again
						release, err := acquire(ctx, key)
						if err != nil {
							t.Fatalf("round %d: acquire: %v", round, err)
						}
						if i.peer {
							checkPeerHeld(t, rc, i.holds(key), true)
						} else {
							checkHeld(t, e.client, contender, e.policy, i.holds(key), !i.separate)
						}
						if err := release(ctx); err != nil {
							t.Fatalf("round %d: release: %v", round, err)
						}
						if i.peer {
							checkPeerHeld(t, rc, i.holds(key), false)
						} else {
							checkFree(t, e.client, i.holds(key))
						}
					}
				})
			}
		})
	}
}

// checkHeld checks that every key of keys is held by c's owner, all with
// one token if oneToken, and that contender is refused each of them.
func checkHeld(t *testing.T, c, contender *lease.Client, p lease.Policy, keys []string, oneToken bool) {
	t.Helper()
	ctx := context.Background()
	tokens := map[lease.Token]bool{}
	for _, k := range keys {
		rec, err := c.Inspect(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if !rec.Held || rec.Owner != c.Owner() {
			t.Fatalf("%q: %+v, want held by %q", k, rec, c.Owner())
		}
		tokens[rec.Token] = true
		if h, err := contender.TryAcquire(ctx, k, p); !errors.Is(err, lease.ErrNotAcquired) {
			if h != nil {
				_ = h.Release(ctx)
			}
			t.Fatalf("%q: a contender's TryAcquire: %v, want ErrNotAcquired", k, err)
		}
	}
	if oneToken && len(tokens) != 1 {
		t.Fatalf("%q: tokens %v, want one", keys, tokens)
	}
}

// checkFree checks that no key of keys is held.
func checkFree(t *testing.T, c *lease.Client, keys []string) {
	t.Helper()
	for _, k := range keys {
		rec, err := c.Inspect(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Held {
			t.Fatalf("%q: %+v after release, want free", k, rec)
		}
	}
}

// checkPeerHeld checks that each key of keys exists on the Valkey server
// and a contender's redislock Obtain is refused it (held), or that none
// exists (!held).
func checkPeerHeld(t *testing.T, rc *redis.Client, keys []string, held bool) {
	t.Helper()
	ctx := context.Background()
	n, err := rc.Exists(ctx, keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := map[bool]int64{true: int64(len(keys)), false: 0}[held]; n != want {
		t.Fatalf("%q: %d of them exist, want %d", keys, n, want)
	}
	if !held {
		return
	}
	for _, k := range keys {
		if l, err := redislock.Obtain(ctx, rc, k, ttl, nil); !errors.Is(err, redislock.ErrNotObtained) {
			if l != nil {
				_ = l.Release(ctx)
			}
			t.Fatalf("%q: a contender's Obtain: %v, want ErrNotObtained", k, err)
		}
	}
}
