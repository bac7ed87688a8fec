package chaos_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/cache"
	"github.com/golib/lease/guard"
	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// cacheValue is a value the cache row publishes: the source version it
// was made from, the publishing token, padding, and a checksum of the
// rest, so that a torn value is seen.
func cacheValue(version int64, token lease.Token) []byte {
	body := fmt.Sprintf("v=%d;tok=%d;pad=%s", version, token, strings.Repeat("x", 64+int(version%512)))
	return fmt.Appendf(nil, "%s;sum=%x", body, sha256.Sum256([]byte(body)))
}

// parseCacheValue returns the version in v, or an error if v is torn.
func parseCacheValue(v []byte) (int64, error) {
	body, sum, ok := strings.Cut(string(v), ";sum=")
	if !ok || fmt.Sprintf("%x", sha256.Sum256([]byte(body))) != sum {
		return 0, fmt.Errorf("torn value %.60q…", v)
	}
	f := strings.SplitN(strings.TrimPrefix(body, "v="), ";", 2)
	return strconv.ParseInt(f[0], 10, 64)
}

// cacheEvent is one recorded operation of the cache row.
type cacheEvent struct {
	kind      string // "grant", "publish", "invalidate", "get"
	key       string
	token     lease.Token
	version   int64
	call, ret time.Time
	err       error
}

type cacheLog struct {
	mu     sync.Mutex
	events []cacheEvent
}

func (l *cacheLog) add(e cacheEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// checkCache checks the cache row's events: a publication that succeeded
// was made by the current holder of the entry's refresh lease (no grant
// of a higher token had returned before it was called), and by a refresh
// that began after every invalidation it had seen (no invalidation was
// called after its grant returned and returned before it was called,
// whether or not the mark is still there: a sweep runs all along); no
// value read was torn (Get fails the row itself on one); and invalidation
// wins: a Get called after Invalidate returned reads a value made from the
// source version the invalidation followed, or a later one.
func checkCache(events []cacheEvent) []string {
	var problems []string
	for _, p := range events {
		if p.kind != "publish" || p.err != nil {
			continue
		}
		for _, g := range events {
			if g.kind == "grant" && g.key == p.key && g.token > p.token && g.ret.Before(p.call) {
				problems = append(problems, fmt.Sprintf("entry %s: published by token %d at %s, after token %d had been granted at %s",
					p.key, p.token, p.call.Format("15:04:05.000000"), g.token, g.ret.Format("15:04:05.000000")))
				break
			}
		}
		for _, g := range events {
			if g.kind != "grant" || g.key != p.key || g.token != p.token {
				continue
			}
			for _, i := range events {
				if i.kind == "invalidate" && i.err == nil && i.key == p.key && g.ret.Before(i.call) && i.ret.Before(p.call) {
					problems = append(problems, fmt.Sprintf("entry %s: published by token %d (granted at %s) at %s, after an invalidation called at %s had returned",
						p.key, p.token, g.ret.Format("15:04:05.000000"), p.call.Format("15:04:05.000000"), i.call.Format("15:04:05.000000")))
					break
				}
			}
		}
	}
	for _, r := range events {
		if r.kind != "get" || r.err != nil {
			continue
		}
		for _, i := range events {
			if i.kind == "invalidate" && i.err == nil && i.key == r.key && i.ret.Before(r.call) && r.version < i.version {
				problems = append(problems, fmt.Sprintf("entry %s: Get at %s read version %d, but Invalidate after version %d had returned at %s",
					r.key, r.call.Format("15:04:05.000000"), r.version, i.version, i.ret.Format("15:04:05.000000")))
				break
			}
		}
	}
	return problems
}

// TestCheckCache shows that the cache checker refuses a publication by a
// superseded holder and a stale read after an invalidation.
func TestCheckCache(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.Unix(1_800_000_000, 0).Add(time.Duration(ms) * time.Millisecond) }
	good := []cacheEvent{
		{kind: "grant", key: "k", token: 1, call: at(0), ret: at(1)},
		{kind: "publish", key: "k", token: 1, version: 1, call: at(2), ret: at(3)},
		{kind: "grant", key: "k", token: 2, call: at(10), ret: at(11)},
		{kind: "invalidate", key: "k", version: 2, call: at(12), ret: at(13)},
		{kind: "get", key: "k", version: 2, call: at(14), ret: at(15)},
	}
	if p := checkCache(good); len(p) != 0 {
		t.Fatalf("a correct history refused: %v", p)
	}
	late := append(append([]cacheEvent(nil), good...), cacheEvent{kind: "publish", key: "k", token: 1, version: 1, call: at(20), ret: at(21)})
	if p := checkCache(late); len(p) != 2 || !strings.Contains(p[0], "after token 2 had been granted") || !strings.Contains(p[1], "after an invalidation called at") {
		t.Errorf("a publication by a superseded holder: %v", p)
	}
	early := append(append([]cacheEvent(nil), good...), cacheEvent{kind: "publish", key: "k", token: 2, version: 1, call: at(20), ret: at(21)})
	if p := checkCache(early); len(p) != 1 || !strings.Contains(p[0], "after an invalidation called at") {
		t.Errorf("a publication by a refresh that began before an invalidation it saw: %v", p)
	}
	stale := append(append([]cacheEvent(nil), good...), cacheEvent{kind: "get", key: "k", version: 1, call: at(20), ret: at(21)})
	if p := checkCache(stale); len(p) != 1 || !strings.Contains(p[0], "read version 1") {
		t.Errorf("a stale read after an invalidation: %v", p)
	}
}

// TestCachePublication runs refreshers that publish cache entries
// directly (Cache.Publish with their lease's guard), each through a proxy
// of its own, a reader that Gets the entries (and loads them on a miss),
// and a writer that changes the source and invalidates. A refresher
// takes longer than its refresh lease before publishing a quarter of the
// time, and the nemesis cuts a refresher off
// for one to two TTLs, so publications by holders that lost their lease
// are attempted all the time. A sweeper deletes the invalidation marks it
// may, all along, on stores that keep ended leases' records half a TTL,
// so that marks of expired leases are swept too. What must hold: nothing
// is published by a holder whose lease was taken over or by a refresh
// that began before an invalidation it saw, no value is torn, and
// invalidation wins (see checkCache).
func TestCachePublication(t *testing.T) {
	addr := testserver.Valkey(t).Addr()
	prefix := valkeyTarget(addr).Prefix
	entries := []string{"page1", "page2"}
	var versions sync.Map // entry → *atomic.Int64
	for _, e := range entries {
		versions.Store(e, new(atomic.Int64))
	}
	version := func(e string) *atomic.Int64 { v, _ := versions.Load(e); return v.(*atomic.Int64) }
	open := func(addr, owner string) (*cache.Cache, *leasevalkey.Store, *lease.Client) {
		c, err := valkeyTarget(addr).ValkeyClient(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		store, err := leasevalkey.New(c, leasevalkey.Options{Prefix: prefix + "lease:", Retention: ttl / 2})
		if err != nil {
			t.Fatal(err)
		}
		leases, err := lease.NewClient(store, lease.ClientOptions{Owner: owner, SweepEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		cc, err := cache.New(c, leases, cache.Options{TTL: 20 * ttl, LeaseTTL: ttl, Wait: ttl / 2, Prefix: prefix + "cache:"})
		if err != nil {
			t.Fatal(err)
		}
		return cc, store, leases
	}
	log := &cacheLog{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	p := rowPolicy(t)
	var (
		proxies []*chaos.Proxy
		refused atomic.Int64 // publications refused: the lease was not current
	)
	for i := range 3 {
		px := newProxy(t, addr)
		proxies = append(proxies, px)
		cc, store, leases := open(px.Addr(), fmt.Sprintf("chaos-refresher-%d", i))
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 0xcac))
			for ctx.Err() == nil {
				e := entries[rng.IntN(len(entries))]
				call := time.Now()
				h, err := leases.TryAcquire(ctx, cc.LeaseKey(e), p)
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				log.add(cacheEvent{kind: "grant", key: e, token: h.Token(), call: call, ret: time.Now()})
				v := version(e).Load()
				d := time.Duration(rng.Int64N(int64(100 * time.Millisecond)))
				if rng.IntN(4) == 0 {
					d = ttl + time.Duration(rng.Int64N(int64(ttl/2))) // past the lease
				}
				time.Sleep(d)
				g, err := store.Guard(h.Snapshot())
				if err != nil {
					t.Error(err)
					return
				}
				pctx, pcancel := context.WithTimeout(ctx, 2*p.Options().OperationTimeout)
				call = time.Now()
				err = cc.Publish(pctx, g, e, cacheValue(v, h.Token()), 0)
				pcancel()
				if errors.Is(err, guard.ErrNotCurrent) {
					refused.Add(1)
				}
				if err == nil || errors.Is(err, lease.ErrIndeterminate) {
					log.add(cacheEvent{kind: "publish", key: e, token: h.Token(), version: v, call: call, ret: time.Now(), err: err})
				}
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), p.Options().OperationTimeout)
				_ = h.Release(rctx)
				rcancel()
			}
		}(uint64(i + 1))
	}
	reader, _, _ := open(addr, "chaos-reader")
	wg.Add(2)
	go func() { // the reader
		defer wg.Done()
		for ctx.Err() == nil {
			for _, e := range entries {
				call := time.Now()
				gctx, gcancel := context.WithTimeout(ctx, 2*ttl)
				v, _, err := reader.Get(gctx, e, func(context.Context, lease.Token) ([]byte, error) {
					return cacheValue(version(e).Load(), 0), nil
				})
				gcancel()
				if err != nil {
					continue
				}
				ver, perr := parseCacheValue(v)
				if perr != nil {
					t.Errorf("entry %s: %v", e, perr)
				}
				log.add(cacheEvent{kind: "get", key: e, version: ver, call: call, ret: time.Now()})
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	writer, _, _ := open(addr, "chaos-writer")
	var swept atomic.Int64 // marks the sweeper deleted
	wg.Add(1)
	go func() { // the sweeper
		defer wg.Done()
		for cursor := ""; ctx.Err() == nil; {
			page, err := writer.Sweep(ctx, lease.SweepOptions{Cursor: cursor, Limit: 100})
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("Sweep: %v", err)
				}
				return
			}
			swept.Add(int64(len(page.Removed)))
			if cursor = page.Next; cursor == "" {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	go func() { // the source's writer
		defer wg.Done()
		for ctx.Err() == nil {
			time.Sleep(500*time.Millisecond + time.Duration(rand.Int64N(int64(400*time.Millisecond))))
			e := entries[rand.IntN(len(entries))]
			v := version(e).Add(1) // the change is committed to the source first
			call := time.Now()
			err := writer.Invalidate(ctx, e)
			log.add(cacheEvent{kind: "invalidate", key: e, version: v, call: call, ret: time.Now(), err: err})
		}
	}()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0xcac))
	until := time.Now().Add(rowDuration(t))
	cuts := 0
	for time.Now().Before(until) {
		time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(700*time.Millisecond))))
		px := proxies[rng.IntN(len(proxies))]
		toxic(t, px, chaos.Both("timeout", map[string]any{"timeout": 0})...)
		time.Sleep(ttl + time.Duration(rng.Int64N(int64(ttl))))
		heal(t, px)
		cuts++
	}
	cancel()
	wg.Wait()
	// The refreshers have stopped: invalidate every entry once more, let
	// the refresh leases end and their retention pass, and sweep, so that
	// the sweeper meets marks to delete however the run went (publications
	// delete most marks before the sweeper sees them).
	fctx := ctxT(t)
	for _, e := range entries {
		if err := writer.Invalidate(fctx, e); err != nil {
			t.Fatalf("final Invalidate(%q): %v", e, err)
		}
	}
	time.Sleep(ttl + ttl/2 + 200*time.Millisecond)
	for cursor := ""; ; {
		page, err := writer.Sweep(fctx, lease.SweepOptions{Cursor: cursor, Limit: 100})
		if err != nil {
			t.Fatalf("final Sweep: %v", err)
		}
		swept.Add(int64(len(page.Removed)))
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	log.mu.Lock()
	events := log.events
	log.mu.Unlock()
	n := map[string]int{}
	for _, e := range events {
		if e.err == nil {
			n[e.kind]++
		}
	}
	t.Logf("chaos-summary %s: %d grants, %d publications (%d refused: lease not current), %d invalidations, %d marks swept, %d reads checked, %d cuts (ran %v)",
		t.Name(), n["grant"], n["publish"], refused.Load(), n["invalidate"], swept.Load(), n["get"], cuts, rowDuration(t))
	for _, p := range checkCache(events) {
		t.Error(p)
	}
	if n["publish"] == 0 || n["get"] == 0 || n["invalidate"] == 0 || swept.Load() == 0 {
		t.Error("the row published, read, invalidated or swept nothing")
	}
}
