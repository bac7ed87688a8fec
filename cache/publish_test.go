package cache_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/cache"
	"github.com/golib/lease/guard"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/testkit/valkeyacl"
	"github.com/golib/lease/lease"
)

// source is the system of record a cache entry is computed from.
type source struct {
	mu sync.Mutex
	v  string
}

func (s *source) read() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v
}

func (s *source) write(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.v = v
}

// TestRefreshLosesToInvalidation: H holds the refresh lease and reads v1; a
// writer commits v2 and invalidates; H's publication of v1 is refused. The
// entry only ever holds nothing or v2.
func TestRefreshLosesToInvalidation(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		ns := namespace()
		h := newReplica(t, topo.addrs(t), ns, "h", cache.Options{})
		writer := newReplica(t, topo.addrs(t), ns, "writer", cache.Options{})
		const key = "report/{2026}"
		src := &source{v: "v1"}

		hd, err := h.leases.TryAcquire(ctxT(t), h.cache.LeaseKey(key), policy(t, lease.PolicyOptions{TTL: time.Minute}))
		if err != nil {
			t.Fatal(err)
		}
		defer hd.Release(ctxT(t))
		g, err := h.store.Guard(hd.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		read := src.read()
		entryIsNothingOr(t, h, key, "v2")

		src.write("v2")
		if err := writer.cache.Invalidate(ctxT(t), key); err != nil {
			t.Fatalf("Invalidate: %v", err)
		}
		entryIsNothingOr(t, h, key, "v2")

		err = h.cache.Publish(ctxT(t), g, key, []byte(read), 0)
		var inv *cache.InvalidatedError
		if !errors.As(err, &inv) || !errors.Is(err, cache.ErrInvalidated) {
			t.Fatalf("Publish of v1 after the invalidation = %v; want an *InvalidatedError", err)
		}
		if inv.Key != key || inv.Token != hd.Token() || inv.Mark < hd.Token() {
			t.Fatalf("InvalidatedError = %+v; want key %q, token %d, mark at least %d", inv, key, hd.Token(), hd.Token())
		}
		if errors.Is(err, guard.ErrNotCurrent) {
			t.Fatalf("the refusal %v also claims the lease check failed", err)
		}
		entryIsNothingOr(t, h, key, "v2")
		if _, ok := rawValue(t, h, key); ok {
			t.Fatal("the refused publication wrote the entry")
		}

		// The lease is still H's; only the generation check refused.
		if err := hd.Validate(ctxT(t)); err != nil {
			t.Fatalf("H's lease after the refusal: %v", err)
		}
		if err := hd.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}

		// The next refresh starts after the invalidation and publishes v2.
		v, info, err := writer.cache.Get(ctxT(t), key, func(context.Context, lease.Token) ([]byte, error) {
			return []byte(src.read()), nil
		})
		if err != nil || string(v) != "v2" || info.Outcome != cache.Loaded || info.Token <= inv.Mark {
			t.Fatalf("Get after the invalidation = %q, %+v, %v; want v2 loaded with a token above %d", v, info, err, inv.Mark)
		}
		entryIsNothingOr(t, h, key, "v2")
	})
}

// TestPausedHolderIsRejected: H reads v1 and is paused past its lease; H2
// takes the lease and publishes v2; H wakes up and publishes v1, which is
// refused by the lease check. The entry only ever holds nothing or v2.
func TestPausedHolderIsRejected(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		ns := namespace()
		h := newReplica(t, topo.addrs(t), ns, "h", cache.Options{})
		h2 := newReplica(t, topo.addrs(t), ns, "h2", cache.Options{})
		const key = "page:/home"
		src := &source{v: "v1"}

		// H's lease is short and H never renews it: H is "paused".
		hd, err := h.leases.TryAcquire(ctxT(t), h.cache.LeaseKey(key), shortPolicy(t))
		if err != nil {
			t.Fatal(err)
		}
		g, err := h.store.Guard(hd.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		read := src.read()
		src.write("v2")

		// H2 waits for H's lease to end on the server, then refreshes.
		wait := policy(t, lease.PolicyOptions{TTL: time.Minute, Wait: 30 * time.Second, Retry: 20 * time.Millisecond})
		h2d, err := h2.leases.Acquire(ctxT(t), h2.cache.LeaseKey(key), wait)
		if err != nil {
			t.Fatal(err)
		}
		g2, err := h2.store.Guard(h2d.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := h2.cache.Publish(ctxT(t), g2, key, []byte(src.read()), 0); err != nil {
			t.Fatalf("H2's Publish: %v", err)
		}
		entryIsNothingOr(t, h, key, "v2")

		// H wakes up.
		err = h.cache.Publish(ctxT(t), g, key, []byte(read), 0)
		var nc *guard.NotCurrentError
		if !errors.As(err, &nc) || !errors.Is(err, guard.ErrNotCurrent) {
			t.Fatalf("paused H's Publish = %v; want a *guard.NotCurrentError", err)
		}
		if errors.Is(err, cache.ErrInvalidated) {
			t.Fatalf("the refusal %v also claims an invalidation", err)
		}
		for _, want := range []string{"cache: publish", `"page:/home"`, "token " + h2d.Token().String(), `"h2"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %s", err, want)
			}
		}
		if v, ok := rawValue(t, h, key); !ok || v != "v2" {
			t.Fatalf("entry = %q, %v; want v2", v, ok)
		}
		// H2 still holds the lease and may publish again.
		if err := h2.cache.Publish(ctxT(t), g2, key, []byte("v2"), 0); err != nil {
			t.Fatalf("H2's second Publish: %v", err)
		}
		if err := h2d.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		entryIsNothingOr(t, h, key, "v2")
	})
}

// TestPublishRefusesReleasedAndExpiredLeases checks the lease half of the
// script on its own, and the detail the error gives.
func TestPublishRefusesReleasedAndExpiredLeases(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		r := newReplica(t, topo.addrs(t), namespace(), "o", cache.Options{})
		ctx := ctxT(t)

		hd, err := r.leases.TryAcquire(ctx, r.cache.LeaseKey("released"), policy(t, lease.PolicyOptions{TTL: time.Minute}))
		if err != nil {
			t.Fatal(err)
		}
		g, _ := r.store.Guard(hd.Snapshot())
		if err := hd.Release(ctx); err != nil {
			t.Fatal(err)
		}
		err = r.cache.Publish(ctx, g, "released", []byte("x"), 0)
		if !errors.Is(err, guard.ErrNotCurrent) || !strings.Contains(err.Error(), "released") {
			t.Fatalf("Publish after release = %v; want ErrNotCurrent saying it was released", err)
		}

		hd, err = r.leases.TryAcquire(ctx, r.cache.LeaseKey("expired"), shortPolicy(t))
		if err != nil {
			t.Fatal(err)
		}
		g, _ = r.store.Guard(hd.Snapshot())
		for {
			rec, err := r.leases.Inspect(ctx, r.cache.LeaseKey("expired"))
			if err != nil {
				t.Fatal(err)
			}
			if !rec.Held {
				break
			}
			time.Sleep(rec.Remaining)
		}
		err = r.cache.Publish(ctx, g, "expired", []byte("x"), 0)
		if !errors.Is(err, guard.ErrNotCurrent) || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("Publish after expiry = %v; want ErrNotCurrent saying it expired", err)
		}
		for _, key := range []string{"released", "expired"} {
			if v, ok := rawValue(t, r, key); ok {
				t.Fatalf("refused publication left %q in %q", v, key)
			}
		}
	})
}

// TestPublishRefusesForeignGuards checks that a guard that does not belong
// to the entry (another key, another Store prefix) is refused before any
// I/O: its record would not be in the entry's hash slot.
func TestPublishRefusesForeignGuards(t *testing.T) {
	t.Parallel()
	addrs := topologies[0].addrs(t)
	r := newReplica(t, addrs, namespace(), "o", cache.Options{})
	// A Store with another prefix on the same server.
	otherStore, err := leasevalkey.New(r.client, leasevalkey.Options{Prefix: namespace() + "-lease:"})
	if err != nil {
		t.Fatal(err)
	}
	otherLeases, err := lease.NewClient(otherStore, lease.ClientOptions{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	p := policy(t, lease.PolicyOptions{TTL: time.Minute})

	hd, err := r.leases.TryAcquire(ctx, r.cache.LeaseKey("a"), p)
	if err != nil {
		t.Fatal(err)
	}
	defer hd.Release(ctx)
	g, _ := r.store.Guard(hd.Snapshot())
	if err := r.cache.Publish(ctx, g, "b", []byte("x"), 0); err == nil || !strings.Contains(err.Error(), "not the entry's refresh lease") {
		t.Errorf("Publish with the guard of another key = %v", err)
	}
	if err := r.cache.Publish(ctx, guard.Guard{}, "a", []byte("x"), 0); err == nil {
		t.Error("Publish with the zero guard succeeded")
	}
	// The same lease key in a Store with another prefix.
	od, err := otherLeases.TryAcquire(ctx, r.cache.LeaseKey("a"), p)
	if err != nil {
		t.Fatal(err)
	}
	defer od.Release(ctx)
	og, _ := otherStore.Guard(od.Snapshot())
	if err := r.cache.Publish(ctx, og, "a", []byte("x"), 0); err == nil || !strings.Contains(err.Error(), "another Prefix") {
		t.Errorf("Publish with the guard of another Store = %v", err)
	}
	if err := r.cache.Publish(ctx, g, "a", []byte("x"), -time.Second); err == nil {
		t.Error("Publish with a negative ttl succeeded")
	}
	if _, ok := rawValue(t, r, "a"); ok {
		t.Fatal("a refused publication wrote the entry")
	}
	if err := r.cache.Publish(ctx, g, "a", []byte("x"), 0); err != nil {
		t.Fatalf("Publish with the right guard: %v", err)
	}
}

// TestInvalidateWithoutLease checks that invalidating an entry that was
// never refreshed works, and that the first refresh after it publishes.
func TestInvalidateWithoutLease(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		r := newReplica(t, topo.addrs(t), namespace(), "o", cache.Options{})
		if err := r.cache.Invalidate(ctxT(t), "never"); err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		v, info, err := r.cache.Get(ctxT(t), "never", constant("x", &calls))
		if err != nil || string(v) != "x" || info.Outcome != cache.Loaded {
			t.Fatalf("Get = %q, %+v, %v", v, info, err)
		}
	})
}

// TestOutOfMemory: on a full server (noeviction, as the lease backend
// wants) a publication is refused whole, with an error saying it was not
// applied, and Invalidate still works.
func TestOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{ExtraArgs: []string{"--maxmemory", "4mb", "--maxmemory-policy", "noeviction"}})
	r := newReplica(t, []string{srv.Addr()}, namespace(), "o", cache.Options{})
	ctx := ctxT(t)
	if _, _, err := r.cache.Get(ctx, "small", constant("v", nil)); err != nil {
		t.Fatal(err)
	}
	// Fill the server.
	filler := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		err := r.client.Do(ctx, r.client.B().Set().Key("filler-"+strconv.Itoa(i)).Value(filler).Build()).Error()
		if err != nil {
			if !strings.Contains(err.Error(), "OOM") {
				t.Fatal(err)
			}
			break
		}
	}
	hd, err := r.leases.TryAcquire(ctx, r.cache.LeaseKey("small"), policy(t, lease.PolicyOptions{TTL: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	defer hd.Release(ctx)
	g, _ := r.store.Guard(hd.Snapshot())
	err = r.cache.Publish(ctx, g, "small", []byte(strings.Repeat("y", 1<<20)), 0)
	if err == nil || errors.Is(err, lease.ErrIndeterminate) || !strings.Contains(err.Error(), "not applied") {
		t.Fatalf("Publish on a full server = %v; want a refusal saying it was not applied", err)
	}
	if v, _ := rawValue(t, r, "small"); v != "v" {
		t.Fatalf("entry = %q after a refused publication; want the old v", v)
	}
	if err := r.cache.Invalidate(ctx, "small"); err != nil {
		t.Fatalf("Invalidate on a full server: %v", err)
	}
	if _, ok := rawValue(t, r, "small"); ok {
		t.Fatal("Invalidate on a full server left the value")
	}
}

// TestDocumentedACLIsEnough runs the whole protocol as a user with exactly
// the ACL rules docs/cache.md and the package documentation give, and
// checks that the rules refuse what would reach other tenants' data.
func TestDocumentedACLIsEnough(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{"doc.go", "../docs/cache.md", "../SECURITY.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(text)), " "), "ACL SETUSER web "+valkeyacl.Cache) {
			t.Errorf("%s does not give the rule ACL SETUSER web %s", doc, valkeyacl.Cache)
		}
	}
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	admin := newClient(t, []string{srv.Addr()})
	ctx := ctxT(t)
	asWeb := func(owner string) *replica {
		c := valkeyacl.Login(t, admin, srv.Addr(), "web", valkeyacl.Cache)
		store, _ := leasevalkey.New(c, leasevalkey.Options{})
		leases, _ := lease.NewClient(store, lease.ClientOptions{Owner: owner})
		cc, err := cache.New(c, leases, cache.Options{TTL: time.Minute, StaleFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return &replica{client: c, store: store, leases: leases, cache: cc}
	}
	a, b := asWeb("a"), asWeb("b")
	// B waits for A's load, so the subscription is exercised too.
	release := make(chan struct{})
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := a.cache.Get(ctx, "k", func(context.Context, lease.Token) ([]byte, error) {
			close(started)
			<-release
			return []byte("v"), nil
		})
		done <- err
	}()
	<-started
	got := make(chan error, 1)
	go func() {
		v, info, err := b.cache.Get(ctx, "k", constant("w", nil))
		if err == nil && (string(v) != "v" || info.Outcome != cache.Shared) {
			err = fmt.Errorf("B got %q, %v", v, info.Outcome)
		}
		got <- err
	}()
	waitForSubscriber(t, &replica{client: admin, cache: a.cache}, "k")
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("A's Get as the ACL user: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("B's Get as the ACL user: %v", err)
	}
	if err := b.cache.Invalidate(ctx, "k"); err != nil {
		t.Fatalf("Invalidate as the ACL user: %v", err)
	}
	if err := a.store.Check(ctx); err != nil {
		t.Fatalf("Check as the ACL user: %v", err)
	}
	// Publish under a refresh lease held by hand, before and after the
	// server forgot the scripts (a restart, a failover: the calls fall
	// back to EVAL and EVAL_RO).
	for round, key := range []string{"p", "q"} {
		if round == 1 {
			if err := admin.Do(ctx, admin.B().ScriptFlush().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if err := a.store.Check(ctx); err != nil {
				t.Fatalf("Check as the ACL user after SCRIPT FLUSH: %v", err)
			}
		}
		h, err := a.leases.TryAcquire(ctx, a.cache.LeaseKey(key), policy(t, lease.PolicyOptions{TTL: time.Minute}))
		if err != nil {
			t.Fatal(err)
		}
		g, err := a.store.Guard(h.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := a.cache.Publish(ctx, g, key, []byte("published"), time.Minute); err != nil {
			t.Fatalf("Publish as the ACL user: %v", err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatalf("Release as the ACL user: %v", err)
		}
		if v, _, err := b.cache.Get(ctx, key, constant("unused", nil)); err != nil || string(v) != "published" {
			t.Fatalf("Get of the published value as the ACL user = %q, %v", v, err)
		}
		if err := b.cache.Invalidate(ctx, key); err != nil {
			t.Fatalf("Invalidate as the ACL user: %v", err)
		}
	}
	valkeyacl.CheckAllUsed(t, admin, valkeyacl.Cache)
	valkeyacl.CheckForbidden(t, admin, a.client, "other:{tenant}")
}

// markOf returns the invalidation mark of key as the server holds it, and
// whether there is one.
func markOf(t testing.TB, r *replica, key string) (string, bool) {
	t.Helper()
	_, _, _, mark, _ := r.cache.EntryNames(key)
	v, err := r.client.Do(ctxT(t), r.client.B().Get().Key(mark).Build()).ToString()
	if valkey.IsValkeyNil(err) {
		return "", false
	}
	if err != nil {
		t.Fatalf("GET %s: %v", mark, err)
	}
	return v, true
}

// TestPublishDeletesTheMark: a publication by a refresh that began after
// the invalidation deletes the mark, which no longer refuses anything; a
// publication the mark refuses keeps it.
func TestPublishDeletesTheMark(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		r := newReplica(t, topo.addrs(t), namespace(), "o", cache.Options{})
		ctx := ctxT(t)
		const key = "page:/{home}"
		old, err := r.leases.TryAcquire(ctx, r.cache.LeaseKey(key), policy(t, lease.PolicyOptions{TTL: time.Minute}))
		if err != nil {
			t.Fatal(err)
		}
		g, _ := r.store.Guard(old.Snapshot())
		if err := r.cache.Invalidate(ctx, key); err != nil {
			t.Fatal(err)
		}
		if m, ok := markOf(t, r, key); !ok || m != old.Token().String() {
			t.Fatalf("mark after Invalidate = %q, %v; want %d", m, ok, old.Token())
		}
		if err := r.cache.Publish(ctx, g, key, []byte("old"), 0); !errors.Is(err, cache.ErrInvalidated) {
			t.Fatalf("Publish by the refresh that began before the invalidation = %v; want ErrInvalidated", err)
		}
		if _, ok := markOf(t, r, key); !ok {
			t.Fatal("a refused publication deleted the mark")
		}
		if err := old.Release(ctx); err != nil {
			t.Fatal(err)
		}
		v, info, err := r.cache.Get(ctx, key, constant("new", nil))
		if err != nil || string(v) != "new" || info.Outcome != cache.Loaded {
			t.Fatalf("Get = %q, %+v, %v; want new, loaded", v, info, err)
		}
		if m, ok := markOf(t, r, key); ok {
			t.Fatalf("the mark %q is left after a publication with token %d", m, info.Token)
		}
		// The old acquisition stays refused by the lease check alone.
		if err := r.cache.Publish(ctx, g, key, []byte("old"), 0); err == nil {
			t.Fatal("the old acquisition published after the mark was deleted")
		}
		if got, _ := rawValue(t, r, key); got != "new" {
			t.Fatalf("entry holds %q; want new", got)
		}
	})
}
