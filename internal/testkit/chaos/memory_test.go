package chaos_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

// TestMemoryBackendModel drives the memory backend and a fenced memory
// store with random operations on a fake clock, records them, and checks
// the history against the model: the model must accept everything the
// reference backend does, and the backend must never do what the model
// refuses. Advancing the clock is an operation of the history; every other
// operation takes no time and is followed by a 1µs tick, so the history is
// sequential.
func TestMemoryBackendModel(t *testing.T) {
	runs := 1
	if long() {
		runs = 50 // 100 random histories each
	}
	for range runs {
		memoryBackendModel(t)
	}
}

func memoryBackendModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		clock := leasetest.NewFakeClock(time.Unix(1_800_000_000, 0))
		rec := chaos.NewRecorderOn(clock)
		lane := chaos.NewLanes("m").New()
		b := chaos.NewRecordingBackend(leasememory.New(leasememory.Options{Clock: clock}), rec, lane)
		store := chaos.NewRecordingStore(&chaos.MemoryStore{}, rec)
		keys := []string{"a", "b"}
		nonces := []string{"n1", "n2", "n3", "n4"}
		type held struct {
			a    lease.Acquisition
			snap lease.Snapshot
		}
		var grants []held
		tick := func() { clock.Advance(time.Microsecond) }
		pick := func(rt *rapid.T) held {
			g := rapid.SampledFrom(grants).Draw(rt, "grant")
			if rapid.IntRange(0, 9).Draw(rt, "forge") == 0 { // an old or forged token
				g.a.Token = lease.Token(rapid.IntRange(0, 5).Draw(rt, "token"))
				g.snap.Token = max(g.a.Token, 1)
			}
			return g
		}
		values := 0
		rt.Repeat(map[string]func(*rapid.T){
			"acquire": func(rt *rapid.T) {
				defer tick()
				req := lease.AcquireRequest{
					Key: rapid.SampledFrom(keys).Draw(rt, "key"), Owner: "o",
					Nonce: rapid.SampledFrom(nonces).Draw(rt, "nonce"),
					TTL:   time.Duration(rapid.IntRange(10, 2000).Draw(rt, "ttl ms")) * time.Millisecond,
				}
				if tok, err := b.Acquire(ctx, req); err == nil {
					a := lease.Acquisition{Key: req.Key, Owner: req.Owner, Nonce: req.Nonce, Token: tok}
					grants = append(grants, held{a, lease.Snapshot{Key: a.Key, Owner: a.Owner, Token: tok}})
				}
			},
			"renew": func(rt *rapid.T) {
				if len(grants) == 0 {
					rt.Skip("nothing granted")
				}
				defer tick()
				ttl := time.Duration(rapid.IntRange(10, 2000).Draw(rt, "ttl ms")) * time.Millisecond
				_ = b.Renew(ctx, pick(rt).a, ttl)
			},
			"release": func(rt *rapid.T) {
				if len(grants) == 0 {
					rt.Skip("nothing granted")
				}
				defer tick()
				_ = b.Release(ctx, pick(rt).a)
			},
			"force release": func(rt *rapid.T) {
				defer tick()
				var token lease.Token
				if len(grants) > 0 && rapid.Bool().Draw(rt, "by token") {
					token = pick(rt).a.Token
				}
				_, _ = b.ForceRelease(ctx, rapid.SampledFrom(keys).Draw(rt, "key"), token)
			},
			"write": func(rt *rapid.T) {
				if len(grants) == 0 {
					rt.Skip("nothing granted")
				}
				defer tick()
				g := pick(rt)
				value := ""
				if rapid.Bool().Draw(rt, "not a claim") {
					values++
					value = fmt.Sprintf("v%d", values)
				}
				_, _ = store.Write(ctx, lane, chaos.Write{Snap: g.snap, Acq: chaos.AcqID(g.a.Nonce), Resource: chaos.Resource(g.a.Key), Value: value})
			},
			"read": func(rt *rapid.T) {
				defer tick()
				_, _, _ = store.Read(ctx, lane, chaos.Resource(rapid.SampledFrom(keys).Draw(rt, "key")))
			},
			"advance": func(rt *rapid.T) {
				d := time.Duration(rapid.IntRange(1, 1500).Draw(rt, "ms")) * time.Millisecond
				op := chaos.Op{Kind: chaos.KindClock, Fault: "clock +" + d.String(), Outcome: chaos.OK, Call: rec.Now()}
				clock.Advance(d)
				op.Return = rec.Now()
				rec.Add(op)
			},
		})
		if res := chaos.Check(rec.Ops(), chaos.CheckOptions{Name: "TestMemoryBackendModel"}); !res.OK() {
			rt.Fatalf("the model refused the memory backend's history: %v", res)
		}
	})
}

// memoryOpen returns an Open for the harness on one shared memory backend
// and store, wrapped by wrap if not nil.
func memoryOpen(b lease.Backend, s chaos.Store) chaos.Open {
	return func(context.Context, string) (lease.Backend, chaos.Store, func(), error) {
		return b, s, func() {}, nil
	}
}

// shortPolicy is the policy of the runs on real time: short enough that
// leases expire, renew and move often in a few seconds.
func shortPolicy(t testing.TB, ttl time.Duration) lease.Policy {
	t.Helper()
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: ttl, Wait: ttl / 3, Retry: ttl / 20})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runMemory runs the harness for d on a memory backend and returns the
// history.
func runMemory(t *testing.T, b lease.Backend, s chaos.Store, d time.Duration) []chaos.Op {
	t.Helper()
	rec := chaos.NewRecorder(nil)
	h := chaos.NewHarness(rec, chaos.Options{
		Keys: []string{"k1", "k2"}, Policy: shortPolicy(t, 200*time.Millisecond), Clients: 4, Open: memoryOpen(b, s),
	})
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
	if err := h.Stop(); err != nil {
		t.Error(err)
	}
	return rec.Ops()
}

// TestHarnessMemory runs the goroutine harness on the memory backend on
// real time, with no fault: the history must check out.
func TestHarnessMemory(t *testing.T) {
	ops := runMemory(t, leasememory.New(leasememory.Options{}), &chaos.MemoryStore{}, time.Second)
	res := chaos.Check(ops, chaos.CheckOptions{Name: t.Name()})
	t.Log(res)
	if !res.OK() {
		t.Fatal(res)
	}
}

// fastClock runs at fastRate times the rate of real time: a backend on it
// lets leases expire in a quarter of their TTL, before a holder's first
// renewal is due (RenewEvery, TTL/3 less up to 20% of jitter), so that
// every lease held that long is taken over while its holder still
// believes it holds it. At twice the rate a lease expired only when a
// renewal came late, and the checker was handed a history that showed
// nothing wrong about one run in ten.
type fastClock struct{ start time.Time }

const fastRate = 4

func (c fastClock) Now() time.Time { return c.start.Add(fastRate * time.Since(c.start)) }
func (c fastClock) NewTimer(d time.Duration) lease.Timer {
	return lease.SystemClock().NewTimer(d / fastRate)
}

// recycler hands out tokens that go round 1, 2, 3, 1, …: a backend that
// forgot its counter.
type recycler struct {
	lease.Backend
	mu   sync.Mutex
	real map[lease.Token]lease.Token // handed out → real
	n    lease.Token
}

func (r *recycler) Acquire(ctx context.Context, req lease.AcquireRequest) (lease.Token, error) {
	tok, err := r.Backend.Acquire(ctx, req)
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for out, in := range r.real {
		if in == tok {
			return out, nil // an idempotent re-grant
		}
	}
	r.n = r.n%3 + 1
	r.real[r.n] = tok
	return r.n, nil
}

func (r *recycler) fix(a lease.Acquisition) lease.Acquisition {
	r.mu.Lock()
	defer r.mu.Unlock()
	a.Token = r.real[a.Token]
	return a
}

func (r *recycler) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	return r.Backend.Renew(ctx, r.fix(a), ttl)
}

func (r *recycler) Release(ctx context.Context, a lease.Acquisition) error {
	return r.Backend.Release(ctx, r.fix(a))
}

// TestCheckerCatchesBrokenBackends runs the harness on backends broken on
// purpose and checks that the checker refuses their histories and writes
// the visualisation.
func TestCheckerCatchesBrokenBackends(t *testing.T) {
	t.Setenv(chaos.EnvOut, t.TempDir())
	for _, c := range []struct {
		name string
		b    func() lease.Backend
	}{
		{"expires leases early", func() lease.Backend {
			return leasememory.New(leasememory.Options{Clock: fastClock{time.Now()}})
		}},
		{"recycles tokens", func() lease.Backend {
			return &recycler{Backend: leasememory.New(leasememory.Options{}), real: map[lease.Token]lease.Token{}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ops := runMemory(t, c.b(), &chaos.MemoryStore{}, time.Second)
			res := chaos.Check(ops, chaos.CheckOptions{Name: t.Name()})
			t.Log(res)
			if res.OK() {
				t.Fatal("the checker accepted the history of a broken backend")
			}
			if len(res.Files) == 0 {
				t.Error("no visualisation written")
			}
		})
	}
}

// TestCheckerCatchesBrokenFences plays the paused-holder story on broken
// fenced stores: A holds token 1, B takes over with token 2 and claims the
// resource, then A's late write arrives.
func TestCheckerCatchesBrokenFences(t *testing.T) {
	t.Setenv(chaos.EnvOut, t.TempDir())
	ctx := context.Background()
	story := func(s chaos.Store) []chaos.Op {
		rec := chaos.NewRecorder(nil)
		lanes := chaos.NewLanes("s")
		a, b, r := lanes.New(), lanes.New(), lanes.New()
		store := chaos.NewRecordingStore(s, rec)
		snapA := lease.Snapshot{Key: "k", Owner: "a", Token: 1}
		snapB := lease.Snapshot{Key: "k", Owner: "b", Token: 2}
		_, _ = store.Write(ctx, a, chaos.Write{Snap: snapA, Resource: "r", Value: "a1"})
		_, _ = store.Write(ctx, b, chaos.Write{Snap: snapB, Resource: "r"})
		_, _ = store.Write(ctx, a, chaos.Write{Snap: snapA, Resource: "r", Value: "a2", Late: true})
		_, _, _ = store.Read(ctx, r, "r")
		return rec.Ops()
	}
	if res := chaos.Check(story(&chaos.MemoryStore{}), chaos.CheckOptions{Name: t.Name()}); !res.OK() {
		t.Fatalf("the checker refused a correct fence: %v", res)
	}
	for _, c := range []struct {
		name string
		s    chaos.Store
	}{
		{"writes before checking the token", &writeFirst{}},
		{"admits lower tokens", &forgetfulFence{s: &chaos.MemoryStore{}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := chaos.Check(story(c.s), chaos.CheckOptions{Name: t.Name()})
			t.Log(res)
			if res.OK() {
				t.Fatal("the checker accepted a broken fence")
			}
		})
	}
}

// writeFirst writes the value, then asks the fence: a stale write changes
// the data although it is refused.
type writeFirst struct{ chaos.MemoryStore }

func (s *writeFirst) Write(ctx context.Context, snap lease.Snapshot, resource, value string) error {
	mark, _, _ := s.MemoryStore.Read(ctx, resource)
	if value != "" && snap.Token < mark {
		// The data write goes through with the fence's own token, and the
		// caller is told it was refused.
		_ = s.MemoryStore.Write(ctx, lease.Snapshot{Key: snap.Key, Owner: snap.Owner, Token: mark}, resource, value)
		return &fence.StaleError{Resource: resource, Key: snap.Key, Token: snap.Token, Current: mark}
	}
	return s.MemoryStore.Write(ctx, snap, resource, value)
}

// forgetfulFence forgets its mark when a write comes in with a lower
// token, and admits it.
type forgetfulFence struct {
	mu sync.Mutex
	s  *chaos.MemoryStore
}

func (f *forgetfulFence) Write(ctx context.Context, snap lease.Snapshot, resource, value string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if mark, _, _ := f.s.Read(ctx, resource); snap.Token < mark {
		f.s = &chaos.MemoryStore{}
	}
	return f.s.Write(ctx, snap, resource, value)
}

func (f *forgetfulFence) Read(ctx context.Context, resource string) (lease.Token, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s.Read(ctx, resource)
}

// TestColumnStoreStory plays the paused-holder story of
// TestCheckerCatchesBrokenFences on PostgreSQL, with the resource fenced
// by columns of its row, once for each shape of WHERE clause that
// chaos.ColumnStore writes with fencecolumn.Update, and once with fencecolumn.Upsert:
// A writes with token 1, B claims with token 2, A's late write must be
// refused and leave the row alone. Break 1 of issue 13 (a fence predicate
// joined to the caller's WHERE clause with a bare AND) fails the shapes
// with a top-level OR.
func TestColumnStoreStory(t *testing.T) {
	t.Setenv(chaos.EnvOut, t.TempDir())
	ctx := context.Background()
	url := postgresDB(t)
	pool, err := chaos.Pool(ctx, url, "chaos-story", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for shape := range chaos.WhereShapes + 1 {
		name := fmt.Sprintf("update, where shape %d", shape)
		if shape == chaos.WhereShapes {
			name = "upsert"
		}
		t.Run(name, func(t *testing.T) {
			s := chaos.NewColumnStore(pool, 1)
			s.FixShape(shape)
			rec := chaos.NewRecorder(nil)
			lanes := chaos.NewLanes("s")
			a, b, r := lanes.New(), lanes.New(), lanes.New()
			store := chaos.NewRecordingStore(s, rec)
			resource := chaos.Resource(keys[0])
			base := uint64(time.Now().UnixMicro()) // above every token of earlier subtests
			snapA := lease.Snapshot{Key: keys[0], Owner: "a", Token: lease.Token(base)}
			snapB := lease.Snapshot{Key: keys[0], Owner: "b", Token: lease.Token(base + 1)}
			if out, err := store.Write(ctx, a, chaos.Write{Snap: snapA, Resource: resource, Value: "a1"}); out != chaos.OK {
				t.Fatal(out, err)
			}
			if out, err := store.Write(ctx, b, chaos.Write{Snap: snapB, Resource: resource}); out != chaos.OK {
				t.Fatal(out, err)
			}
			_, _ = store.Write(ctx, a, chaos.Write{Snap: snapA, Resource: resource, Value: "a2", Late: true})
			_, _, _ = store.Read(ctx, r, resource)
			res := chaos.Check(rec.Ops(), chaos.CheckOptions{Name: t.Name()})
			if !res.OK() {
				t.Fatalf("a stale write through fence columns got in: %v", res)
			}
		})
	}
}
