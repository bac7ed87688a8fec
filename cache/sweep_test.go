package cache_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/cache"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/testkit/valkeyacl"
	"github.com/golib/lease/lease"
)

// sweepAll walks s to the end of its walk and returns what it removed,
// sorted.
func sweepAll(t testing.TB, s lease.Sweeper, dry bool) []string {
	t.Helper()
	var removed []string
	cursor := ""
	for pages := 0; pages == 0 || cursor != ""; pages++ {
		page, err := s.Sweep(ctxT(t), lease.SweepOptions{Cursor: cursor, Limit: 100, DryRun: dry})
		if err != nil {
			t.Fatalf("Sweep(%q, dry %v): %v", cursor, dry, err)
		}
		removed = append(removed, page.Removed...)
		cursor = page.Next
	}
	slices.Sort(removed)
	return removed
}

// withRetention returns a replica like newReplica's whose lease Store keeps
// the records of ended leases for retention.
func withRetention(t testing.TB, addrs []string, ns, owner string, retention time.Duration) *replica {
	t.Helper()
	r := &replica{client: newClient(t, addrs)}
	var err error
	if r.store, err = leasevalkey.New(r.client, leasevalkey.Options{Prefix: ns + "-lease:", Retention: retention}); err != nil {
		t.Fatal(err)
	}
	if r.leases, err = lease.NewClient(r.store, lease.ClientOptions{Owner: owner, SweepEvery: -1}); err != nil {
		t.Fatal(err)
	}
	if r.cache, err = cache.New(r.client, r.leases, cache.Options{TTL: time.Minute, Prefix: ns + "-cache:"}); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSweepDeletesRedundantMarks sets up one invalidated entry per state
// of its refresh lease's record and checks which marks a sweep deletes: a
// dry run lists them and deletes nothing, the sweep deletes exactly those,
// and the acquisition that began before an invalidation and still holds
// its lease stays refused.
func TestSweepDeletesRedundantMarks(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		ns := namespace()
		addrs := topo.addrs(t)
		// Records of ended leases are kept 1.5s: "expired-old" expires
		// more than that before the sweep, "expired" less.
		r := withRetention(t, addrs, ns, "o", 1500*time.Millisecond)
		ctx := ctxT(t)
		long := policy(t, lease.PolicyOptions{TTL: time.Minute})
		acquire := func(key string, p lease.Policy) *lease.Handle {
			t.Helper()
			h, err := r.leases.TryAcquire(ctx, r.cache.LeaseKey(key), p)
			if err != nil {
				t.Fatalf("TryAcquire(%s): %v", key, err)
			}
			return h
		}
		invalidate := func(key string) {
			t.Helper()
			if err := r.cache.Invalidate(ctx, key); err != nil {
				t.Fatal(err)
			}
			if _, ok := markOf(t, r, key); !ok {
				t.Fatalf("Invalidate(%s) left no mark", key)
			}
		}
		untilExpired := func(key string) {
			t.Helper()
			for {
				rec, err := r.leases.Inspect(ctx, r.cache.LeaseKey(key))
				if err != nil {
					t.Fatal(err)
				}
				if !rec.Held {
					return
				}
				time.Sleep(rec.Remaining + 5*time.Millisecond)
			}
		}

		// held: the acquisition that began before the invalidation is
		// current; its mark must stay.
		held := acquire("held", long)
		defer held.Release(ctx)
		heldGuard, _ := r.store.Guard(held.Snapshot())
		invalidate("held")

		// released, force-released: the acquisition ended for good.
		h := acquire("released", long)
		invalidate("released")
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		h = acquire("force-released", long)
		invalidate("force-released")
		if _, err := r.store.ForceRelease(ctx, r.cache.LeaseKey("force-released"), h.Token()); err != nil {
			t.Fatal(err)
		}

		// moved-on: a later acquisition holds the lease (and has not
		// published yet).
		h = acquire("moved-on", long)
		invalidate("moved-on")
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		later := acquire("moved-on", long)
		defer later.Release(ctx)

		// gone: the record was removed (its retention passed).
		h = acquire("gone", long)
		invalidate("gone")
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		record, _, _, _, _ := r.cache.EntryNames("gone")
		if err := r.client.Do(ctx, r.client.B().Del().Key(record).Build()).Error(); err != nil {
			t.Fatal(err)
		}

		// expired-old: the holder died; its lease expired more than the
		// retention ago. expired: less than the retention ago.
		acquire("expired-old", shortPolicy(t))
		invalidate("expired-old")
		untilExpired("expired-old")
		time.Sleep(1600 * time.Millisecond)
		acquire("expired", shortPolicy(t))
		invalidate("expired")
		untilExpired("expired")

		want := []string{r.cache.LeaseKey("expired-old"), r.cache.LeaseKey("force-released"), r.cache.LeaseKey("gone"), r.cache.LeaseKey("moved-on"), r.cache.LeaseKey("released")}
		all := []string{"held", "released", "force-released", "moved-on", "gone", "expired-old", "expired"}
		if got := sweepAll(t, r.cache, true); !slices.Equal(got, want) {
			t.Fatalf("dry run removed %q; want %q", got, want)
		}
		for _, key := range all {
			if _, ok := markOf(t, r, key); !ok {
				t.Fatalf("the dry run deleted the mark of %s", key)
			}
		}
		sweeper, err := cache.NewSweeper(r.client, r.store, ns+"-cache:")
		if err != nil {
			t.Fatal(err)
		}
		if got := sweepAll(t, sweeper, false); !slices.Equal(got, want) {
			t.Fatalf("sweep removed %q; want %q", got, want)
		}
		for _, key := range all {
			_, ok := markOf(t, r, key)
			if deleted := slices.Contains(want, r.cache.LeaseKey(key)); ok == deleted {
				t.Errorf("after the sweep, %s has a mark: %v; want %v", key, ok, !deleted)
			}
		}
		if got := sweepAll(t, r.cache, false); len(got) != 0 {
			t.Fatalf("a second sweep removed %q", got)
		}

		// The refresh that began before the invalidation is still refused.
		if err := r.cache.Publish(ctx, heldGuard, "held", []byte("stale"), 0); !errors.Is(err, cache.ErrInvalidated) {
			t.Fatalf("Publish by the held pre-invalidation acquisition after the sweep = %v; want ErrInvalidated", err)
		}
		// Once it ends, the next sweep deletes that mark too.
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := sweepAll(t, r.cache, false); !slices.Equal(got, []string{r.cache.LeaseKey("held")}) {
			t.Fatalf("sweep after the release removed %q; want the held entry's mark", got)
		}
	})
}

// TestSweepKeepsExpiredMarksForever: with lease.KeepForever, the mark of
// an entry whose refresher died stays until the next acquisition.
func TestSweepKeepsExpiredMarksForever(t *testing.T) {
	t.Parallel()
	r := withRetention(t, topologies[0].addrs(t), namespace(), "o", lease.KeepForever)
	ctx := ctxT(t)
	if _, err := r.leases.TryAcquire(ctx, r.cache.LeaseKey("k"), shortPolicy(t)); err != nil {
		t.Fatal(err)
	}
	if err := r.cache.Invalidate(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // past the short lease
	if got := sweepAll(t, r.cache, false); len(got) != 0 {
		t.Fatalf("sweep removed %q; want nothing", got)
	}
	h, err := r.leases.TryAcquire(ctx, r.cache.LeaseKey("k"), shortPolicy(t))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	if got := sweepAll(t, r.cache, false); !slices.Equal(got, []string{r.cache.LeaseKey("k")}) {
		t.Fatalf("sweep after the next acquisition removed %q", got)
	}
}

// TestSweepLeavesForeignKeys: keys under the Prefix that are no marks of
// this Cache (a name that does not decode, a mark that holds no number)
// are left alone, and bad arguments are refused.
func TestSweepLeavesForeignKeys(t *testing.T) {
	t.Parallel()
	ns := namespace()
	r := newReplica(t, topologies[0].addrs(t), ns, "o", cache.Options{})
	ctx := ctxT(t)
	_, _, _, mark, _ := r.cache.EntryNames("k")
	foreign := []string{
		ns + "-cache:{" + ns + "-cache:%ZZ}:invalidated", // not an escape
		ns + "-cache:{" + ns + "-cache:}:invalidated",    // no cache key
		mark, // a mark that holds no token
	}
	for _, k := range foreign {
		if err := r.client.Do(ctx, r.client.B().Set().Key(k).Value("junk").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if got := sweepAll(t, r.cache, false); len(got) != 0 {
		t.Fatalf("sweep removed %q; want nothing", got)
	}
	for _, k := range foreign {
		if n, err := r.client.Do(ctx, r.client.B().Exists().Key(k).Build()).AsInt64(); err != nil || n != 1 {
			t.Fatalf("EXISTS %s = %d, %v after the sweep", k, n, err)
		}
	}
	if _, err := r.cache.Sweep(ctx, lease.SweepOptions{Limit: 0}); err == nil {
		t.Error("Sweep with limit 0 succeeded")
	}
	if _, err := r.cache.Sweep(ctx, lease.SweepOptions{Cursor: "x", Limit: 1}); err == nil {
		t.Error("Sweep with a bad cursor succeeded")
	}
	for _, bad := range []struct {
		c valkey.Client
		s *leasevalkey.Store
		p string
	}{{nil, r.store, ""}, {r.client, nil, ""}, {r.client, r.store, "a{b"}} {
		if _, err := cache.NewSweeper(bad.c, bad.s, bad.p); err == nil {
			t.Errorf("NewSweeper(%v, %v, %q) succeeded", bad.c, bad.s, bad.p)
		}
	}
}

// TestSweepRacesNoStalePublication runs invalidations, refreshes and
// sweeps of a few entries at once. Refreshers hold their lease for a
// while before they publish (some past the lease, some die without
// releasing), so publications with tokens older than the latest
// invalidation are attempted all the time, while the sweep deletes every
// mark it may. What must hold: no publication succeeds whose refresh lease
// was granted before an invalidation was called that returned before the
// publication was called (the refresh started before an invalidation it
// has seen), and the sweep deletes marks.
func TestSweepRacesNoStalePublication(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		ns := namespace()
		addrs := topo.addrs(t)
		keys := []string{"a", "b", "c"}
		type event struct {
			kind      string // "grant", "publish", "invalidate"
			key       string
			token     lease.Token
			call, ret time.Time
		}
		var (
			mu     sync.Mutex
			events []event
		)
		record := func(e event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
		}
		ctx, cancel := context.WithTimeout(ctxT(t), 4*time.Second)
		defer cancel()
		var (
			wg      sync.WaitGroup
			refused atomic.Int64 // publications the mark refused
		)
		for i := range 3 {
			r := withRetention(t, addrs, ns, fmt.Sprintf("refresher-%d", i), 50*time.Millisecond)
			p := shortPolicy(t) // 500ms
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), 23))
				for ctx.Err() == nil {
					key := keys[rng.IntN(len(keys))]
					call := time.Now()
					h, err := r.leases.TryAcquire(ctx, r.cache.LeaseKey(key), p)
					if err != nil {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					record(event{kind: "grant", key: key, token: h.Token(), call: call, ret: time.Now()})
					g, _ := r.store.Guard(h.Snapshot())
					switch n := rng.IntN(10); {
					case n < 6: // a pause within the lease
						time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
					case n < 8: // a pause past the lease
						time.Sleep(550 * time.Millisecond)
					}
					call = time.Now()
					err = r.cache.Publish(ctx, g, key, []byte(h.Token().String()), 0)
					if err == nil {
						record(event{kind: "publish", key: key, token: h.Token(), call: call, ret: time.Now()})
					}
					if errors.Is(err, cache.ErrInvalidated) {
						refused.Add(1)
					}
					if rng.IntN(5) > 0 { // else the refresher dies: its lease expires
						_ = h.Release(context.WithoutCancel(ctx))
					}
				}
			})
		}
		w := withRetention(t, addrs, ns, "writer", 50*time.Millisecond)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(99, 23))
			for ctx.Err() == nil {
				key := keys[rng.IntN(len(keys))]
				call := time.Now()
				if err := w.cache.Invalidate(ctx, key); err == nil {
					record(event{kind: "invalidate", key: key, call: call, ret: time.Now()})
				}
				time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
			}
		})
		var swept int
		wg.Go(func() {
			for ctx.Err() == nil {
				cursor := ""
				for ctx.Err() == nil {
					page, err := w.cache.Sweep(ctx, lease.SweepOptions{Cursor: cursor, Limit: 100})
					if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
						// A node that answered late on a loaded machine (seen:
						// ROLE on a cluster node): sweeping is retried by design,
						// and this test is about what a sweep may remove.
						t.Logf("Sweep, tried again: %v", err)
						continue
					}
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("Sweep: %v", err)
						}
						return
					}
					swept += len(page.Removed)
					if cursor = page.Next; cursor == "" {
						break
					}
				}
			}
		})
		wg.Wait()
		n := map[string]int{}
		for _, p := range events {
			n[p.kind]++
			if p.kind != "publish" {
				continue
			}
			var g event
			for _, e := range events {
				if e.kind == "grant" && e.key == p.key && e.token == p.token {
					g = e
				}
			}
			for _, i := range events {
				if i.kind == "invalidate" && i.key == p.key && g.ret.Before(i.call) && i.ret.Before(p.call) {
					t.Errorf("entry %s: token %d (granted at %s) published at %s, after an invalidation called at %s returned at %s",
						p.key, p.token, g.ret.Format("15:04:05.000000"), p.call.Format("15:04:05.000000"),
						i.call.Format("15:04:05.000000"), i.ret.Format("15:04:05.000000"))
					break
				}
			}
		}
		t.Logf("%d grants, %d publications (%d refused by the mark), %d invalidations, %d marks swept",
			n["grant"], n["publish"], refused.Load(), n["invalidate"], swept)
		if n["publish"] == 0 || refused.Load() == 0 || n["invalidate"] == 0 || swept == 0 {
			t.Error("the test published, refused, invalidated or swept nothing")
		}
	})
}

// TestSweepACL: a user with the documented cache rule sweeps the marks
// once it is also granted SCAN and ROLE (valkeyacl.CacheSweep), as the
// documentation says, and without them is refused before anything
// changes.
func TestSweepACL(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	admin := newClient(t, []string{srv.Addr()})
	ctx := ctxT(t)
	login := func(rule string) *cache.Cache {
		c := valkeyacl.Login(t, admin, srv.Addr(), "web", rule)
		store, _ := leasevalkey.New(c, leasevalkey.Options{})
		leases, _ := lease.NewClient(store, lease.ClientOptions{Owner: "o", SweepEvery: -1})
		cc, err := cache.New(c, leases, cache.Options{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		h, err := leases.TryAcquire(ctx, cc.LeaseKey("k"), policy(t, lease.PolicyOptions{TTL: time.Minute}))
		if err != nil {
			t.Fatal(err)
		}
		if err := cc.Invalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return cc
	}
	_, _, _, mark, _ := login(valkeyacl.Cache).EntryNames("k")
	for _, rule := range []string{valkeyacl.Cache, valkeyacl.Cache + " +role"} {
		_, err := login(rule).Sweep(ctx, lease.SweepOptions{Limit: 100})
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("Sweep with %q = %v; want a permission error", rule, err)
		}
		if n, err := admin.Do(ctx, admin.B().Exists().Key(mark).Build()).AsInt64(); err != nil || n != 1 {
			t.Fatalf("EXISTS %s = %d, %v after a refused sweep", mark, n, err)
		}
	}
	c := login(valkeyacl.Cache + " " + valkeyacl.CacheSweep)
	if got := sweepAll(t, c, true); !slices.Equal(got, []string{"cache:k"}) {
		t.Fatalf("dry run with %s removed %q; want cache:k", valkeyacl.CacheSweep, got)
	}
	if got := sweepAll(t, c, false); !slices.Equal(got, []string{"cache:k"}) {
		t.Fatalf("Sweep with %s removed %q; want cache:k", valkeyacl.CacheSweep, got)
	}
	valkeyacl.CheckAllUsed(t, admin, valkeyacl.CacheSweep)
}
