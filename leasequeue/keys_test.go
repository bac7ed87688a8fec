package leasequeue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"
	"pgregory.net/rapid"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

// collidingItems are pairs of (queue, item) that used to share names:
// "orders"[eu/1] and "orders/eu"[1] shared one item hash, attempts counter
// and fence on Valkey; "a"[b/items/c] and "a/items/b"[c] shared one lease
// key; the third pair tries the escape character.
var collidingItems = []struct{ q1, id1, q2, id2 string }{
	{"orders", "eu/1", "orders/eu", "1"},
	{"a", "b/items/c", "a/items/b", "c"},
	{"p%", "2F", "p", "%2F"},
}

// TestQueuesDoNotShareItems is the regression test of keys that were not
// one-to-one: after "orders" completed "eu/1", "orders/eu"[1] read done
// without ever being claimed, and could never be claimed. Each item must
// be its own, on every store: completing one leaves the other pending, and
// the two can be claimed at the same time. On the cluster, every script
// also finds its keys in one slot.
func TestQueuesDoNotShareItems(t *testing.T) {
	run := func(name string, mk func(testing.TB) *store, f func(t *testing.T, s *store)) {
		t.Run(name, func(t *testing.T) { t.Parallel(); f(t, mk(t)) })
	}
	forEach := func(f func(t *testing.T, s *store)) {
		run("valkey", valkeyStore, f)
		run("valkey-cluster", valkeyClusterStore, f)
		run("postgres", postgresStore, f)
	}
	forEach(func(t *testing.T, s *store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		policy := loadedPolicy(t, 5*time.Second)
		for _, p := range collidingItems {
			for _, held := range []bool{false, true} {
				q1n, q2n := p.q1, p.q2
				if held { // fresh queues, the same collision
					q1n, q2n = "held-"+q1n, "held-"+q2n
				}
				src1, src2 := s.source(t, q1n), s.source(t, q2n)
				q1 := newQueue(t, s, src1, "w1", leasequeue.Options{Name: q1n, Policy: policy})
				q2 := newQueue(t, s, src2, "w2", leasequeue.Options{Name: q2n, Policy: policy})
				if k1, k2 := q1.Key(p.id1), q2.Key(p.id2); k1 == k2 {
					t.Errorf("%s[%s] and %s[%s] have one lease key %q", q1n, p.id1, q2n, p.id2, k1)
				}
				mustEnqueue(ctx, t, src1, p.id1)
				mustEnqueue(ctx, t, src2, p.id2)

				c1, err := q1.Claim(ctx, p.id1)
				if err != nil {
					t.Fatalf("claim %s[%s]: %v", q1n, p.id1, err)
				}
				if held {
					// While the first is claimed, the second is free.
					c2, err := q2.Claim(ctx, p.id2)
					if err != nil {
						t.Fatalf("claim %s[%s] while %s[%s] is claimed: %v", q2n, p.id2, q1n, p.id1, err)
					}
					if err := c1.Complete(ctx); err != nil {
						t.Fatalf("complete %s[%s]: %v", q1n, p.id1, err)
					}
					if err := c2.Complete(ctx); err != nil {
						t.Fatalf("complete %s[%s]: %v", q2n, p.id2, err)
					}
				} else {
					if err := c1.Complete(ctx); err != nil {
						t.Fatalf("complete %s[%s]: %v", q1n, p.id1, err)
					}
					if it := mustItem(ctx, t, src2, p.id2); it.State != leasequeue.Pending || it.Attempts != 0 || it.Token != 0 {
						t.Errorf("after %s[%s] was completed, %s[%s] is %+v; want it pending, never attempted", q1n, p.id1, q2n, p.id2, it)
					}
					c2, err := q2.Claim(ctx, p.id2)
					if err != nil {
						t.Fatalf("claim %s[%s] after %s[%s] was completed: %v", q2n, p.id2, q1n, p.id1, err)
					}
					if err := c2.Complete(ctx); err != nil {
						t.Fatalf("complete %s[%s]: %v", q2n, p.id2, err)
					}
				}
				for _, c := range []struct {
					src           source
					q, id, worker string
				}{{src1, q1n, p.id1, "w1"}, {src2, q2n, p.id2, "w2"}} {
					if it := mustItem(ctx, t, c.src, c.id); it.State != leasequeue.Done || it.Attempts != 1 || it.Owner != c.worker {
						t.Errorf("%s[%s] = %+v; want done after one attempt, by %s", c.q, c.id, it, c.worker)
					}
				}
			}
		}
	})
}

// noServer is a valkey.Client that is never called: naming does no I/O.
type noServer struct{ valkey.Client }

// TestValkeyNamesFollowTheLayout pins every name the Valkey source builds,
// and every lease key of queues, to the module's
// one encoding (package keyspace, whose tests prove it one to one), and
// checks that the keys one script touches share a hash slot.
func TestValkeyNamesFollowTheLayout(t *testing.T) {
	names := rapid.OneOf(rapid.StringMatching(`[a%{}/:2F7BD]{1,8}`), rapid.StringN(1, 16, 64)).
		Filter(func(s string) bool { return fence.ValidateResource(s) == nil })
	rapid.Check(t, func(t *rapid.T) {
		q, id, g, w := names.Draw(t, "queue"), names.Draw(t, "id"), names.Draw(t, "group"), names.Draw(t, "worker")
		src, err := leasequeue.NewValkeySource(noServer{}, q, leasequeue.ValkeyOptions{Prefix: "lq:"})
		if err != nil {
			t.Fatal(err)
		}
		qt, it := keyspace.Tag(q), keyspace.Tag(q, id)
		for _, c := range []struct{ what, got, want string }{
			{"ready list", src.ReadyKey(), keyspace.Name("lq:", qt, ":ready")},
			{"due set", src.DueKey(), keyspace.Name("lq:", qt, ":due")},
			{"done set", src.DoneKey(), keyspace.Name("lq:", qt, ":done")},
			{"dead set", src.DeadKey(), keyspace.Name("lq:", qt, ":dead")},
			{"ready times", src.SinceKey(), keyspace.Name("lq:", qt, ":since")},
			{"item hash", src.ItemKey(id, "item"), keyspace.Name("lq:", qt, ":item/"+keyspace.Escape(id)+"/item")},
			{"fence key", src.FenceKey(id), keyspace.Name("lq:", qt, ":item/"+keyspace.Escape(id)+"/fence")},
			{"item lease", itemLease(t, q, id), keyspace.LeaseKey(q+"/", keyspace.QueueItem, id)},
			{"prune lease", pruneLease(t, q), keyspace.LeaseKey(q+"/", keyspace.QueuePrune, "")},
		} {
			if c.got != c.want {
				t.Fatalf("%s of queue %q, item %q, group %q, worker %q is %q, want %q", c.what, q, id, g, w, c.got, c.want)
			}
		}
		if res, err := src.Resource(id); err != nil || res != it {
			t.Fatalf("Resource(%q) = %q, %v; want %q", id, res, err, it)
		}
		// Every script touches the queue's keys and its items' keys
		// (claim.lua names the items it picks): all in one slot.
		for _, group := range [][]string{
			{src.ReadyKey(), src.DueKey(), src.DoneKey(), src.DeadKey(), src.SinceKey(),
				src.FenceKey(id), src.ItemKey(id, "item"), src.ItemKey(id, "receipt")},
		} {
			for _, k := range group[1:] {
				if hashTag(k) != hashTag(group[0]) {
					t.Fatalf("%q and %q are in different hash slots", group[0], k)
				}
			}
		}
	})
}

// itemLease returns the lease key of item id of queue q.
func itemLease(t *rapid.T, q, id string) string { return newKeysQueue(t, q).Key(id) }

// pruneLease returns the lease key under which the workers of queue q
// prune.
func pruneLease(t *rapid.T, q string) string { return newKeysQueue(t, q).PruneKey() }

// newKeysQueue returns a queue named q, on memory.
func newKeysQueue(t *rapid.T, q string) *leasequeue.Queue {
	c, err := lease.NewClient(leasememory.New(leasememory.Options{}), lease.ClientOptions{Owner: "w"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	qu, err := leasequeue.New(c, leasequeue.NewMemorySource(leasequeue.MemoryOptions{}), leasequeue.Options{Name: q, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	return qu
}

// hashTag returns the part of a Valkey key that decides its hash slot.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}
