package cache_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/cache"
	"github.com/golib/lease/guard"
	"github.com/golib/lease/lease"
)

func TestGetLoadsThenHits(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		r := newReplica(t, topo.addrs(t), namespace(), "o", cache.Options{})
		var calls atomic.Int64
		ctx := ctxT(t)
		v, info, err := r.cache.Get(ctx, "k", constant("v", &calls))
		if err != nil || string(v) != "v" || info.Outcome != cache.Loaded || info.Token == 0 {
			t.Fatalf("first Get = %q, %+v, %v; want v loaded", v, info, err)
		}
		first := info.Token
		v, info, err = r.cache.Get(ctx, "k", constant("other", &calls))
		if err != nil || string(v) != "v" || info.Outcome != cache.Hit || info.Token != first {
			t.Fatalf("second Get = %q, %+v, %v; want a hit on v with token %d", v, info, err, first)
		}
		if err := r.cache.Invalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		v, info, err = r.cache.Get(ctx, "k", constant("w", &calls))
		if err != nil || string(v) != "w" || info.Outcome != cache.Loaded || info.Token <= first {
			t.Fatalf("Get after Invalidate = %q, %+v, %v; want w loaded with a token above %d", v, info, err, first)
		}
		if n := calls.Load(); n != 2 {
			t.Fatalf("%d loads, want 2", n)
		}
		// An empty value is a value.
		v, info, err = r.cache.Get(ctx, "empty", constant("", nil))
		if err != nil || v == nil || len(v) != 0 || info.Outcome != cache.Loaded {
			t.Fatalf("Get of an empty value = %q (nil %v), %+v, %v", v, v == nil, info, err)
		}
		v, info, err = r.cache.Get(ctx, "empty", constant("x", nil))
		if err != nil || v == nil || len(v) != 0 || info.Outcome != cache.Hit {
			t.Fatalf("Get of a cached empty value = %q (nil %v), %+v, %v", v, v == nil, info, err)
		}
	})
}

// TestStampede sends 100 concurrent Gets of one missing key through 4
// replicas, each with its own valkey-go client: exactly one load runs, and
// every Get returns its value.
func TestStampede(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		const replicas, callers = 4, 100
		ns := namespace()
		var rs []*replica
		for i := range replicas {
			rs = append(rs, newReplica(t, topo.addrs(t), ns, "replica-"+string(rune('a'+i)), cache.Options{}))
		}
		var (
			loads   atomic.Int64
			started sync.WaitGroup
			all     = make(chan struct{})
		)
		started.Add(callers)
		go func() { started.Wait(); close(all) }()
		load := func(ctx context.Context, tok lease.Token) ([]byte, error) {
			loads.Add(1)
			// Hold the lease until every caller has asked, and a little
			// longer, so that they all miss.
			select {
			case <-all:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			time.Sleep(50 * time.Millisecond)
			return []byte("value from token " + tok.String()), nil
		}
		type got struct {
			v    string
			info cache.Info
			err  error
		}
		results := make(chan got, callers)
		ctx := ctxT(t)
		for i := range callers {
			go func() {
				started.Done()
				v, info, err := rs[i%replicas].cache.Get(ctx, "hot", load)
				results <- got{string(v), info, err}
			}()
		}
		outcomes := map[cache.Outcome]int{}
		var first string
		for range callers {
			g := <-results
			if g.err != nil {
				t.Fatalf("Get: %v", g.err)
			}
			if first == "" {
				first = g.v
			}
			if g.v != first || !strings.HasPrefix(g.v, "value from token ") {
				t.Fatalf("Get returned %q and %q", first, g.v)
			}
			outcomes[g.info.Outcome]++
		}
		if n := loads.Load(); n != 1 {
			t.Fatalf("%d loads; want exactly 1", n)
		}
		if outcomes[cache.Loaded] != 1 {
			t.Fatalf("outcomes %v; want exactly one Loaded", outcomes)
		}
		t.Logf("outcomes: %v", outcomes)
		for _, r := range rs {
			if n := r.cache.Flights(); n != 0 {
				t.Fatalf("%d flights left running", n)
			}
		}
	})
}

// TestFailedLoadPublishesNothing: a load that returns an error or panics
// publishes nothing and releases the refresh lease, so the next caller
// refreshes at once.
func TestFailedLoadPublishesNothing(t *testing.T) {
	t.Parallel()
	boom := errors.New("source unavailable")
	for _, tc := range []struct {
		name  string
		load  cache.LoadFunc
		check func(t *testing.T, err error)
	}{
		{"error", func(context.Context, lease.Token) ([]byte, error) { return []byte("partial"), boom },
			func(t *testing.T, err error) {
				if !errors.Is(err, boom) {
					t.Fatalf("Get = %v; want the load's error", err)
				}
			}},
		{"panic", func(context.Context, lease.Token) ([]byte, error) { panic("load exploded") },
			func(t *testing.T, err error) {
				var pe *cache.PanicError
				if !errors.As(err, &pe) || pe.Value != "load exploded" || pe.Key != "k" || len(pe.Stack) == 0 {
					t.Fatalf("Get = %v; want a *PanicError with the value, key and stack", err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachTopology(t, func(t *testing.T, topo topology) {
				r := newReplica(t, topo.addrs(t), namespace(), "o", cache.Options{})
				ctx := ctxT(t)
				v, _, err := r.cache.Get(ctx, "k", tc.load)
				if v != nil {
					t.Fatalf("failed Get returned %q", v)
				}
				tc.check(t, err)
				if !strings.HasPrefix(err.Error(), "cache: ") || !strings.Contains(err.Error(), `"k"`) {
					t.Errorf("error %q does not start with cache: and name the key", err)
				}
				if _, ok := rawValue(t, r, "k"); ok {
					t.Fatal("a failed load published a value")
				}
				rec, err := r.leases.Inspect(ctx, r.cache.LeaseKey("k"))
				if err != nil || rec.Held {
					t.Fatalf("refresh lease after a failed load: %+v, %v; want free", rec, err)
				}
				v, info, err := r.cache.Get(ctx, "k", constant("good", nil))
				if err != nil || string(v) != "good" || info.Outcome != cache.Loaded {
					t.Fatalf("Get after the failure = %q, %+v, %v; want good loaded", v, info, err)
				}
			})
		})
	}
}

// TestWaiterTakesOverFromFailedLoad: replica B waits for replica A's load;
// A's load fails; B is woken by the release and loads the value itself.
func TestWaiterTakesOverFromFailedLoad(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		ns := namespace()
		a := newReplica(t, topo.addrs(t), ns, "a", cache.Options{})
		b := newReplica(t, topo.addrs(t), ns, "b", cache.Options{})
		ctx := ctxT(t)
		fail := make(chan struct{})
		aStarted := make(chan struct{})
		aDone := make(chan error, 1)
		go func() {
			_, _, err := a.cache.Get(ctx, "k", func(ctx context.Context, _ lease.Token) ([]byte, error) {
				close(aStarted)
				<-fail
				panic("A fails")
			})
			aDone <- err
		}()
		<-aStarted
		bDone := make(chan error, 1)
		var bInfo cache.Info
		go func() {
			v, info, err := b.cache.Get(ctx, "k", constant("from b", nil))
			if err == nil && string(v) != "from b" {
				err = errors.New("B got " + string(v))
			}
			bInfo = info
			bDone <- err
		}()
		waitForSubscriber(t, b, "k")
		close(fail)
		var pe *cache.PanicError
		if err := <-aDone; !errors.As(err, &pe) {
			t.Fatalf("A's Get = %v; want a *PanicError", err)
		}
		if err := <-bDone; err != nil {
			t.Fatalf("B's Get: %v", err)
		}
		if bInfo.Outcome != cache.Loaded {
			t.Fatalf("B's outcome %v; want loaded", bInfo.Outcome)
		}
	})
}

// waitForSubscriber waits until some replica listens for publications of
// key: a Get is waiting for another's refresh.
func waitForSubscriber(t *testing.T, r *replica, key string) {
	t.Helper()
	_, _, _, _, channel := r.cache.EntryNames(key)
	ctx := ctxT(t)
	for {
		vals, err := r.client.Do(ctx, r.client.B().PubsubShardnumsub().Channel(channel).Build()).ToArray()
		if err != nil || len(vals) != 2 {
			t.Fatalf("PUBSUB SHARDNUMSUB: %v %v", vals, err)
		}
		if n, _ := vals[1].AsInt64(); n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no Get waits for a publication")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestInvalidationDuringLoadLoadsAgain: the source changes and the entry is
// invalidated while a load runs; its value is not published, the load runs
// again, and Get returns the new value.
func TestInvalidationDuringLoadLoadsAgain(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		ns := namespace()
		r := newReplica(t, topo.addrs(t), ns, "reader", cache.Options{})
		w := newReplica(t, topo.addrs(t), ns, "writer", cache.Options{})
		src := &source{v: "v1"}
		ctx := ctxT(t)
		var loads atomic.Int64
		read := make(chan struct{})
		resume := make(chan struct{})
		done := make(chan struct{})
		var (
			v    []byte
			info cache.Info
			err  error
		)
		go func() {
			defer close(done)
			v, info, err = r.cache.Get(ctx, "k", func(context.Context, lease.Token) ([]byte, error) {
				val := src.read()
				if loads.Add(1) == 1 {
					close(read)
					<-resume
				}
				return []byte(val), nil
			})
		}()
		<-read
		src.write("v2")
		if err := w.cache.Invalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		close(resume)
		<-done
		if err != nil || string(v) != "v2" || info.Outcome != cache.Loaded {
			t.Fatalf("Get = %q, %+v, %v; want v2 loaded", v, info, err)
		}
		if n := loads.Load(); n != 2 {
			t.Fatalf("%d loads; want 2", n)
		}
		if got, _ := rawValue(t, r, "k"); got != "v2" {
			t.Fatalf("entry holds %q; want v2", got)
		}
	})
}

// TestLostLeasePublishesNothing: another acquisition takes the refresh
// lease while a load runs (here by rewriting the record, as a takeover
// after an expiry would); the value is not published.
func TestLostLeasePublishesNothing(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		r := newReplica(t, topo.addrs(t), namespace(), "o", cache.Options{})
		ctx := ctxT(t)
		record, _, _, _, _ := r.cache.EntryNames("k")
		_, _, err := r.cache.Get(ctx, "k", func(_ context.Context, tok lease.Token) ([]byte, error) {
			later := (tok + 1).String()
			err := r.client.Do(ctx, r.client.B().Hset().Key(record).FieldValue().
				FieldValue("token", later).FieldValue("owner", "intruder").FieldValue("nonce", "other").
				FieldValue("expires", "99999999999999999").Build()).Error()
			if err != nil {
				return nil, err
			}
			return []byte("v1"), nil
		})
		if !errors.Is(err, guard.ErrNotCurrent) && !errors.Is(err, lease.ErrLost) {
			t.Fatalf("Get = %v; want a refusal for the lost lease", err)
		}
		if _, ok := rawValue(t, r, "k"); ok {
			t.Fatal("a load that lost its lease published")
		}
	})
}

// TestStaleServedWhileAnotherRefreshes: with StaleFor, a Get that finds the
// value past its TTL while another process holds the refresh lease returns
// the old value marked Stale at once.
func TestStaleServedWhileAnotherRefreshes(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		ns := namespace()
		o := cache.Options{TTL: 20 * time.Millisecond, StaleFor: time.Hour}
		a := newReplica(t, topo.addrs(t), ns, "a", o)
		b := newReplica(t, topo.addrs(t), ns, "b", o)
		ctx := ctxT(t)
		if _, _, err := a.cache.Get(ctx, "k", constant("old", nil)); err != nil {
			t.Fatal(err)
		}
		// Wait for the value to go stale on the server.
		_, _, fresh, _, _ := a.cache.EntryNames("k")
		for {
			n, err := a.client.Do(ctx, a.client.B().Exists().Key(fresh).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		hd, err := b.leases.TryAcquire(ctx, b.cache.LeaseKey("k"), policy(t, lease.PolicyOptions{TTL: time.Minute}))
		if err != nil {
			t.Fatal(err)
		}
		v, info, err := a.cache.Get(ctx, "k", func(context.Context, lease.Token) ([]byte, error) {
			t.Error("load ran while another replica holds the refresh lease")
			return nil, errors.New("unexpected")
		})
		if err != nil || string(v) != "old" || info.Outcome != cache.Stale || info.Token == 0 {
			t.Fatalf("Get = %q, %+v, %v; want old, stale, with the token that published it", v, info, err)
		}
		if err := hd.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// With the lease free, the stale Get refreshes.
		v, info, err = a.cache.Get(ctx, "k", constant("new", nil))
		if err != nil || string(v) != "new" || info.Outcome != cache.Loaded {
			t.Fatalf("Get = %q, %+v, %v; want new, loaded", v, info, err)
		}
		// Invalidate removes the stale copy too.
		if err := b.cache.Invalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if _, ok := rawValue(t, a, "k"); ok {
			t.Fatal("Invalidate left the value")
		}
	})
}

// TestWaitIsBounded: a Get waiting for a refresh that never publishes
// returns ErrWaitTimeout after Options.Wait, or the context's error.
func TestWaitIsBounded(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		ns := namespace()
		a := newReplica(t, topo.addrs(t), ns, "a", cache.Options{Wait: 50 * time.Millisecond})
		holder := newReplica(t, topo.addrs(t), ns, "holder", cache.Options{})
		ctx := ctxT(t)
		hd, err := holder.leases.TryAcquire(ctx, holder.cache.LeaseKey("k"), policy(t, lease.PolicyOptions{TTL: time.Minute}))
		if err != nil {
			t.Fatal(err)
		}
		defer hd.Release(ctx)
		_, _, err = a.cache.Get(ctx, "k", constant("x", nil))
		if !errors.Is(err, cache.ErrWaitTimeout) || !strings.Contains(err.Error(), `"holder"`) {
			t.Fatalf("Get = %v; want ErrWaitTimeout naming the holder", err)
		}

		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			_, _, err := holder.cache.Get(cctx, "k", constant("x", nil))
			errc <- err
		}()
		waitForSubscriber(t, holder, "k")
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Get = %v; want context.Canceled", err)
		}
		if _, ok := rawValue(t, a, "k"); ok {
			t.Fatal("entry written")
		}
	})
}

// TestLargeValuesAreNeverTorn publishes values of several MiB, each made of
// one repeated byte, while readers check that every value they get is
// whole.
func TestLargeValuesAreNeverTorn(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		const size = 4 << 20
		ns := namespace()
		w := newReplica(t, topo.addrs(t), ns, "writer", cache.Options{})
		rd := newReplica(t, topo.addrs(t), ns, "reader", cache.Options{})
		ctx := ctxT(t)
		var gen atomic.Int64
		load := func(context.Context, lease.Token) ([]byte, error) {
			return bytes.Repeat([]byte{byte('a' + gen.Add(1)%26)}, size), nil
		}
		stop := make(chan struct{})
		var readers sync.WaitGroup
		var reads atomic.Int64
		for range 3 {
			readers.Add(1)
			go func() {
				defer readers.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					v, _, err := rd.cache.Get(ctx, "big", load)
					if err != nil {
						t.Error(err)
						return
					}
					if len(v) != size || bytes.Count(v, v[:1]) != size {
						t.Errorf("torn value: %d bytes, %d of them %q", len(v), bytes.Count(v, v[:1]), v[:1])
						return
					}
					reads.Add(1)
				}
			}()
		}
		for range 10 {
			if _, _, err := w.cache.Get(ctx, "big", load); err != nil {
				t.Fatal(err)
			}
			if err := w.cache.Invalidate(ctx, "big"); err != nil {
				t.Fatal(err)
			}
		}
		close(stop)
		readers.Wait()
		t.Logf("%d whole reads of %d MiB values", reads.Load(), size>>20)
	})
}

// TestEntryKeysShareTheLeaseSlot checks, on the cluster, that every key and
// the channel of an entry hash to the slot of its refresh lease's record,
// for keys that try to break the hash tag.
func TestEntryKeysShareTheLeaseSlot(t *testing.T) {
	t.Parallel()
	addrs := topologies[1].addrs(t)
	r := newReplica(t, addrs, namespace(), "o", cache.Options{})
	ctx := ctxT(t)
	slot := func(name string) int64 {
		n, err := r.client.Do(ctx, r.client.B().ClusterKeyslot().Key(name).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	seen := map[int64]bool{}
	for _, key := range []string{"a", "a}", "{a}", "}{", "{user1000}.following", "%7D", "ключ/日本語", strings.Repeat("}", 100)} {
		record, value, fresh, mark, channel := r.cache.EntryNames(key)
		want := slot(record)
		seen[want] = true
		for _, name := range []string{value, fresh, mark, channel} {
			if got := slot(name); got != want {
				t.Errorf("key %q: %s is in slot %d, its lease record %s in %d", key, name, got, record, want)
			}
		}
		// And the whole protocol works there.
		if _, _, err := r.cache.Get(ctx, key, constant("v", nil)); err != nil {
			t.Errorf("Get(%q): %v", key, err)
		}
		if err := r.cache.Invalidate(ctx, key); err != nil {
			t.Errorf("Invalidate(%q): %v", key, err)
		}
	}
	if len(seen) < 4 {
		t.Errorf("the keys landed in only %d slots; the tag is not the key", len(seen))
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	t.Parallel()
	addrs := topologies[0].addrs(t)
	r := newReplica(t, addrs, namespace(), "o", cache.Options{})
	cases := []struct {
		name   string
		client valkey.Client
		leases *lease.Client
		o      cache.Options
		want   string
	}{
		{"nil client", nil, r.leases, cache.Options{TTL: time.Second}, "nil valkey client"},
		{"nil leases", r.client, nil, cache.Options{TTL: time.Second}, "nil lease client"},
		{"no TTL", r.client, r.leases, cache.Options{}, "TTL"},
		{"brace", r.client, r.leases, cache.Options{TTL: time.Second, Prefix: "a{"}, "Prefix"},
		{"negative StaleFor", r.client, r.leases, cache.Options{TTL: time.Second, StaleFor: -1}, "StaleFor"},
		{"negative Wait", r.client, r.leases, cache.Options{TTL: time.Second, Wait: -1}, "Wait"},
		{"short LeaseTTL", r.client, r.leases, cache.Options{TTL: time.Second, LeaseTTL: time.Millisecond}, "LeaseTTL"},
	}
	for _, tc := range cases {
		if _, err := cache.New(tc.client, tc.leases, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "cache: New: ") {
			t.Errorf("%s: New = %v; want an error mentioning %s", tc.name, err, tc.want)
		}
	}
	// A lease client on another backend cannot guard Valkey entries.
	other, _ := lease.NewClient(fakeBackend{}, lease.ClientOptions{Owner: "o"})
	if _, err := cache.New(r.client, other, cache.Options{TTL: time.Second}); err == nil || !strings.Contains(err.Error(), "*leasevalkey.Store") {
		t.Errorf("New with a non-Valkey lease backend = %v", err)
	}
	// Bad keys fail before any I/O.
	for _, key := range []string{"", "a\nb", strings.Repeat("k", lease.MaxKeyLen)} {
		if _, _, err := r.cache.Get(ctxT(t), key, constant("x", nil)); !errors.Is(err, lease.ErrInvalidKey) {
			t.Errorf("Get(%.20q) = %v; want ErrInvalidKey", key, err)
		}
		if err := r.cache.Invalidate(ctxT(t), key); !errors.Is(err, lease.ErrInvalidKey) {
			t.Errorf("Invalidate(%.20q) = %v; want ErrInvalidKey", key, err)
		}
	}
	if _, _, err := r.cache.Get(ctxT(t), "k", nil); err == nil {
		t.Error("Get with a nil load function succeeded")
	}
}

// fakeBackend is a lease.Backend that is not a Valkey Store.
type fakeBackend struct{ lease.Backend }

func TestObserverSeesEveryStep(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		events []string
	)
	obs := cache.ObserverFunc(func(e cache.Event) {
		mu.Lock()
		defer mu.Unlock()
		name := strings.TrimPrefix(fmt.Sprintf("%T", e), "*cache.")
		if s, ok := e.(*cache.Served); ok {
			name += "/" + s.Outcome.String()
		}
		if e.Info().Key != "k" {
			name += "(key " + e.Info().Key + ")"
		}
		events = append(events, name)
	})
	r := newReplica(t, topologies[0].addrs(t), namespace(), "o", cache.Options{Observer: obs})
	ctx := ctxT(t)
	r.cache.Get(ctx, "k", constant("v", nil))
	r.cache.Get(ctx, "k", constant("v", nil))
	r.cache.Invalidate(ctx, "k")
	r.cache.Get(ctx, "k", func(context.Context, lease.Token) ([]byte, error) { return nil, errors.New("no") })
	want := []string{
		"Published", "Refreshed", "Served/loaded",
		"Served/hit",
		"Invalidated",
		"RefreshFailed", "GetFailed",
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(events, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v; want %v", events, want)
	}
}

// TestMixedStaleForShareEntries: replicas with and without StaleFor share
// entries; the one without never serves a value past its TTL, whoever
// published it.
func TestMixedStaleForShareEntries(t *testing.T) {
	t.Parallel()
	forEachTopology(t, func(t *testing.T, topo topology) {
		ns := namespace()
		keeps := newReplica(t, topo.addrs(t), ns, "keeps", cache.Options{TTL: 300 * time.Millisecond, StaleFor: time.Hour})
		plain := newReplica(t, topo.addrs(t), ns, "plain", cache.Options{TTL: time.Hour})
		ctx := ctxT(t)

		// Published by the replica that keeps stale values: both see it fresh.
		v, info, err := keeps.cache.Get(ctx, "k", constant("kept", nil))
		if err != nil || info.Outcome != cache.Loaded {
			t.Fatalf("Get = %q, %+v, %v", v, info, err)
		}
		first := info.Token
		v, info, err = plain.cache.Get(ctx, "k", constant("other", nil))
		if err != nil || string(v) != "kept" || info.Outcome != cache.Hit || info.Token != first {
			t.Fatalf("plain Get of a fresh marked value = %q, %+v, %v; want a hit", v, info, err)
		}
		// Past its TTL the value is stale: the plain replica refreshes.
		_, _, fresh, _, _ := keeps.cache.EntryNames("k")
		for {
			n, err := keeps.client.Do(ctx, keeps.client.B().Exists().Key(fresh).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		v, info, err = plain.cache.Get(ctx, "k", constant("plain", nil))
		if err != nil || string(v) != "plain" || info.Outcome != cache.Loaded {
			t.Fatalf("plain Get of a stale value = %q, %+v, %v; want its own load", v, info, err)
		}
		// Published by the plain replica: fresh for both.
		v, info, err = keeps.cache.Get(ctx, "k", constant("other", nil))
		if err != nil || string(v) != "plain" || info.Outcome != cache.Hit {
			t.Fatalf("Get of a plain value = %q, %+v, %v; want a hit", v, info, err)
		}
	})
}
