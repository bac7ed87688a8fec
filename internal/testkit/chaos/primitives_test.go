package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

func permitGrant(lane, acq string, slot, n int, token uint64, call, ret, ttl int64) chaos.Op {
	return chaos.Op{Lane: lane, Kind: chaos.KindAcquire, Key: lease.PermitKey("s", slot), Sem: "s", Permits: n, Acq: acq,
		Token: token, TTL: ttl, Outcome: chaos.OK, Call: t0 + call*ms, Return: t0 + ret*ms}
}

func permitOp(kind chaos.Kind, lane, acq string, slot int, token uint64, outcome chaos.Outcome, call, ret, ttl int64) chaos.Op {
	op := leaseOp(kind, lane, acq, token, outcome, call, ret, ttl)
	op.Key, op.Sem = lease.PermitKey("s", slot), "s"
	return op
}

// setOf is an operation of acquisition acq on the set keys; member names
// the key a refusal or a loss was about.
func setOf(kind chaos.Kind, lane, acq string, keys []string, token uint64, outcome chaos.Outcome, member string, call, ret, ttl int64) chaos.Op {
	return chaos.Op{Lane: lane, Kind: kind, Key: strings.Join(keys, ","), Keys: keys, Member: member, Acq: acq,
		Token: token, TTL: ttl, Outcome: outcome, Call: t0 + call*ms, Return: t0 + ret*ms}
}

// semWrite is a write of acquisition acq's permit at slot to the
// resource r, fenced by the semaphore's key.
func semWrite(lane string, slot int, token uint64, value string, outcome chaos.Outcome, out uint64, call, ret int64) chaos.Op {
	op := write(lane, token, value, outcome, out, call, ret)
	op.Key, op.Lease, op.Fence = "s", lease.PermitKey("s", slot), chaos.FenceSemaphore
	return op
}

// setRefused is a refused acquisition of the set keys, naming the holder
// of member with token holder.
func setRefused(lane, acq string, keys []string, member string, holder uint64, call, ret int64) chaos.Op {
	op := setOf(chaos.KindAcquire, lane, acq, keys, 0, chaos.NotAcquired, member, call, ret, 1000*ms)
	op.Out = holder
	return op
}

// TestPermitAndSetModel runs the checker on small histories of permits
// and sets, legal and not: each rule of the extended model, and the
// checks beside it (the semaphore's bound, its tokens across slots).
func TestPermitAndSetModel(t *testing.T) {
	t.Setenv(chaos.EnvOut, t.TempDir())
	const ttl = 1000 * ms
	jk := []string{"j", "k"}
	cases := []struct {
		name  string
		ops   []chaos.Op
		legal bool
		want  string // a part of the first problem
	}{
		{"two permits among two, a third after a release", []chaos.Op{
			permitGrant("a/0", "A", 0, 2, 1, 0, 10, ttl),
			permitGrant("b/0", "B", 1, 2, 2, 20, 30, ttl),
			permitOp(chaos.KindRelease, "a/0", "A", 0, 1, chaos.OK, 100, 110, 0),
			permitGrant("c/0", "C", 0, 2, 3, 200, 210, ttl),
		}, true, ""},
		{"a permit slot out of range", []chaos.Op{
			permitGrant("a/0", "A", 0, 2, 1, 0, 10, ttl),
			permitGrant("b/0", "B", 1, 2, 2, 20, 30, ttl),
			permitGrant("c/0", "C", 2, 2, 3, 40, 50, ttl),
		}, false, "out of range"},
		{"a permit slot granted twice", []chaos.Op{
			permitGrant("a/0", "A", 0, 2, 1, 0, 10, ttl),
			permitGrant("b/0", "B", 0, 2, 2, 20, 30, ttl),
		}, false, "lease s/permit/0: not linearizable"},
		{"more permits than the bound, with a lower number asked later", []chaos.Op{
			permitGrant("a/0", "A", 0, 3, 1, 0, 10, ttl),
			permitGrant("b/0", "B", 1, 3, 2, 20, 30, ttl),
			permitGrant("c/0", "C", 2, 3, 3, 40, 50, ttl),
			// Asking among 2 while the three hold: no slot below 2 is free.
			permitGrant("d/0", "D", 1, 2, 4, 60, 70, ttl),
		}, false, "lease s/permit/1"},
		{"a permit renewed after its slot was granted again", []chaos.Op{
			permitGrant("a/0", "A", 0, 1, 1, 0, 10, ttl),
			permitGrant("c/0", "C", 0, 1, 2, 1100, 1110, ttl),
			permitOp(chaos.KindRenew, "a/0", "A", 0, 1, chaos.OK, 1200, 1210, ttl),
		}, false, "lease s/permit/0: not linearizable"},
		{"a permit renewed, so its slot is still held", []chaos.Op{
			permitGrant("a/0", "A", 0, 1, 1, 0, 10, ttl),
			permitOp(chaos.KindRenew, "a/0", "A", 0, 1, chaos.OK, 500, 510, ttl),
			permitGrant("c/0", "C", 0, 1, 2, 1100, 1110, ttl),
		}, false, "lease s/permit/0: not linearizable"},
		{"permit tokens out of order across slots", []chaos.Op{
			permitGrant("a/0", "A", 0, 2, 5, 0, 10, ttl),
			permitGrant("b/0", "B", 1, 2, 3, 20, 30, ttl),
		}, false, "must rise across the semaphore"},
		{"a permit granted by an unanswered attempt, returned by the retry", []chaos.Op{
			{Lane: "a/0", Kind: chaos.KindAcquire, Key: "s", Sem: "s", Permits: 2, Acq: "A", TTL: ttl, Outcome: chaos.Unknown,
				Call: t0, Return: t0 + 150*ms},
			permitGrant("b/0", "B", 1, 2, 6, 20, 30, ttl),
			permitGrant("a/1", "A", 0, 2, 5, 200, 210, ttl),
		}, true, ""},
		{"concurrent permit grants in any token order", []chaos.Op{
			permitGrant("a/0", "A", 0, 2, 5, 0, 30, ttl),
			permitGrant("b/0", "B", 1, 2, 3, 10, 20, ttl),
		}, true, ""},
		{"a permit token issued twice across slots", []chaos.Op{
			permitGrant("a/0", "A", 0, 2, 5, 0, 30, ttl),
			permitGrant("b/0", "B", 1, 2, 5, 10, 20, ttl),
		}, false, "granted twice"},
		{"an idempotent permit re-grant", []chaos.Op{
			permitGrant("a/0", "A", 0, 2, 5, 0, 10, ttl),
			permitGrant("b/0", "B", 1, 2, 6, 20, 30, ttl),
			permitGrant("a/0", "A", 0, 2, 5, 40, 50, ttl),
		}, true, ""},
		{"a refused permit names no permit key", []chaos.Op{
			permitGrant("a/0", "A", 0, 1, 5, 0, 10, ttl),
			{Lane: "b/0", Kind: chaos.KindAcquire, Key: "s", Sem: "s", Permits: 1, Acq: "B", Outcome: chaos.NotAcquired, Out: 5,
				Call: t0 + 20*ms, Return: t0 + 30*ms},
		}, true, ""},
		{"writes fenced by the semaphore's key, an older permit refused", []chaos.Op{
			semWrite("b/0", 1, 6, "y", chaos.OK, 0, 0, 10),
			semWrite("a/0", 0, 5, "z", chaos.Stale, 6, 20, 30),
			read("c/0", 6, "y", 40, 50),
		}, true, ""},
		{"a write fenced by the semaphore's key below its mark", []chaos.Op{
			semWrite("b/0", 1, 6, "y", chaos.OK, 0, 0, 10),
			semWrite("a/0", 0, 5, "z", chaos.OK, 0, 20, 30),
		}, false, "resource r: not linearizable"},
		{"a set after the lease on one of its keys was released", []chaos.Op{
			grant("a/0", "A", 1, 0, 10, ttl),
			leaseOp(chaos.KindRelease, "a/0", "A", 1, chaos.OK, 20, 30, 0),
			setOf(chaos.KindAcquire, "b/0", "B", jk, 2, chaos.OK, "", 40, 50, ttl),
			setOf(chaos.KindRenew, "b/0", "B", jk, 2, chaos.OK, "", 300, 310, ttl),
			setOf(chaos.KindRelease, "b/0", "B", jk, 2, chaos.OK, "", 600, 610, 0),
			grant("c/0", "C", 3, 700, 710, ttl),
		}, true, ""},
		{"a set while the lease on one of its keys holds", []chaos.Op{
			grant("a/0", "A", 1, 0, 10, ttl),
			setOf(chaos.KindAcquire, "b/0", "B", jk, 2, chaos.OK, "", 100, 110, ttl),
		}, false, "lease k: not linearizable"},
		{"a lease on a key of a set that holds", []chaos.Op{
			setOf(chaos.KindAcquire, "b/0", "B", jk, 2, chaos.OK, "", 0, 10, ttl),
			grant("a/0", "A", 3, 100, 110, ttl),
		}, false, "lease k: not linearizable"},
		{"two overlapping sets", []chaos.Op{
			setOf(chaos.KindAcquire, "a/0", "A", []string{"i", "k"}, 1, chaos.OK, "", 0, 10, ttl),
			setOf(chaos.KindAcquire, "b/0", "B", jk, 2, chaos.OK, "", 100, 110, ttl),
		}, false, "lease k: not linearizable"},
		{"two disjoint sets", []chaos.Op{
			setOf(chaos.KindAcquire, "a/0", "A", []string{"h", "i"}, 1, chaos.OK, "", 0, 10, ttl),
			setOf(chaos.KindAcquire, "b/0", "B", jk, 2, chaos.OK, "", 100, 110, ttl),
		}, true, ""},
		{"a set's token not above a key's earlier token", []chaos.Op{
			grant("a/0", "A", 5, 0, 10, ttl),
			leaseOp(chaos.KindRelease, "a/0", "A", 5, chaos.OK, 20, 30, 0),
			setOf(chaos.KindAcquire, "b/0", "B", jk, 4, chaos.OK, "", 40, 50, ttl),
		}, false, "lease k: not linearizable"},
		{"a set refused naming the holder of its key", []chaos.Op{
			grant("a/0", "A", 1, 0, 10, ttl),
			setRefused("b/0", "B", jk, "k", 1, 40, 50),
		}, true, ""},
		{"a set refused naming a released holder of its key", []chaos.Op{
			grant("a/0", "A", 1, 0, 10, ttl),
			leaseOp(chaos.KindRelease, "a/0", "A", 1, chaos.OK, 20, 30, 0),
			setRefused("b/0", "B", jk, "k", 1, 40, 50),
		}, false, "lease k: not linearizable"},
		{"a set's renewal after one of its keys was superseded", []chaos.Op{
			setOf(chaos.KindAcquire, "b/0", "B", jk, 2, chaos.OK, "", 0, 10, ttl),
			grant("a/0", "A", 3, 1100, 1110, ttl),
			setOf(chaos.KindRenew, "b/0", "B", jk, 2, chaos.OK, "", 1200, 1210, ttl),
		}, false, "lease k: not linearizable"},
		{"a set's release lost on one key may have ended the other", []chaos.Op{
			setOf(chaos.KindAcquire, "b/0", "B", jk, 2, chaos.OK, "", 0, 10, ttl),
			{Lane: "op/0", Kind: chaos.KindForceRelease, Key: "k", Outcome: chaos.OK, Out: 2, Call: t0 + 20*ms, Return: t0 + 30*ms},
			setOf(chaos.KindRelease, "b/0", "B", jk, 2, chaos.Lost, "k", 40, 50, 0),
			grant("c/0", "C", 3, 60, 70, ttl),
		}, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := chaos.Check(c.ops, chaos.CheckOptions{Name: t.Name(), NoFiles: c.legal})
			if res.OK() != c.legal {
				t.Fatalf("legal = %v, want %v: %v", res.OK(), c.legal, res)
			}
			if !c.legal && !slices.ContainsFunc(res.Problems, func(p string) bool { return strings.Contains(p, c.want) }) {
				t.Errorf("no problem mentions %q: %v", c.want, res)
			}
		})
	}
}

// TestExpand checks that a set's operations become one per key, as
// Expand documents, and that expanding twice changes nothing.
func TestExpand(t *testing.T) {
	jk := []string{"j", "k"}
	ops := []chaos.Op{
		setOf(chaos.KindAcquire, "a/0", "A", jk, 2, chaos.OK, "", 0, 10, 1000*ms),
		setOf(chaos.KindAcquire, "b/0", "B", jk, 0, chaos.NotAcquired, "k", 20, 30, 1000*ms),
		setOf(chaos.KindRenew, "a/0", "A", jk, 2, chaos.Lost, "j", 40, 50, 1000*ms),
		setOf(chaos.KindRelease, "a/0", "A", jk, 2, chaos.Lost, "j", 60, 70, 0),
	}
	got := chaos.Expand(ops)
	var desc []string
	for _, op := range got {
		desc = append(desc, fmt.Sprintf("%s %s %s", op.Kind, op.Key, op.Outcome))
	}
	want := []string{"acquire j ok", "acquire k ok", "acquire k not-acquired", "renew j lost", "release j lost", "release k unknown"}
	if !slices.Equal(desc, want) {
		t.Errorf("Expand gave %q, want %q", desc, want)
	}
	if again := chaos.Expand(got); len(again) != len(got) {
		t.Errorf("Expand of an expanded history gave %d operations, want %d", len(again), len(got))
	}
}

// TestMemoryPrimitivesModel is TestMemoryBackendModel for permits and
// sets: it drives the memory backend with random acquisitions of permits
// (among 1 to 3, so the number changes) and of sets of keys that plain
// leases take too, renewals and releases with real, old and forged
// tokens, fenced writes per slot, per semaphore and by a key of a set,
// reads and clock steps, and checks the history with the model: the
// model must accept what the reference backend does.
func TestMemoryPrimitivesModel(t *testing.T) {
	runs := 1
	if long() {
		runs = 20
	}
	for range runs {
		memoryPrimitivesModel(t)
	}
}

func memoryPrimitivesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		clock := leasetest.NewFakeClock(time.Unix(1_800_000_000, 0))
		rec := chaos.NewRecorderOn(clock)
		lane := chaos.NewLanes("m").New()
		b := chaos.NewRecordingBackend(leasememory.New(leasememory.Options{Clock: clock}), rec, lane)
		store := chaos.NewRecordingStore(&chaos.MemoryStore{}, rec)
		keys := []string{"a", "b", "c"}
		nonces := []string{"n1", "n2", "n3", "n4"}
		type held struct {
			a     lease.Acquisition
			keys  []string // a set's
			sem   string   // a permit's
			token lease.Token
		}
		var grants []held
		tick := func() { clock.Advance(time.Microsecond) }
		ttl := func(rt *rapid.T) time.Duration {
			return time.Duration(rapid.IntRange(10, 2000).Draw(rt, "ttl ms")) * time.Millisecond
		}
		pick := func(rt *rapid.T) held {
			g := rapid.SampledFrom(grants).Draw(rt, "grant")
			if rapid.IntRange(0, 9).Draw(rt, "forge") == 0 { // an old or forged token
				g.a.Token = lease.Token(rapid.IntRange(0, 5).Draw(rt, "token"))
			}
			return g
		}
		values := 0
		rt.Repeat(map[string]func(*rapid.T){
			"acquire lease": func(rt *rapid.T) {
				defer tick()
				req := lease.AcquireRequest{Key: rapid.SampledFrom(keys).Draw(rt, "key"), Owner: "o",
					Nonce: rapid.SampledFrom(nonces).Draw(rt, "nonce"), TTL: ttl(rt)}
				if tok, err := b.Acquire(ctx, req); err == nil {
					grants = append(grants, held{a: lease.Acquisition{Key: req.Key, Owner: "o", Nonce: req.Nonce, Token: tok}, token: tok})
				}
			},
			"acquire permit": func(rt *rapid.T) {
				defer tick()
				req := lease.AcquireRequest{Key: "s", Owner: "o", Nonce: rapid.SampledFrom(nonces).Draw(rt, "nonce"), TTL: ttl(rt)}
				if slot, tok, err := b.AcquirePermit(ctx, req, rapid.IntRange(1, 3).Draw(rt, "permits")); err == nil {
					a := lease.Acquisition{Key: lease.PermitKey("s", slot), Owner: "o", Nonce: req.Nonce, Token: tok}
					grants = append(grants, held{a: a, sem: "s", token: tok})
				}
			},
			"acquire set": func(rt *rapid.T) {
				defer tick()
				set := rapid.SliceOfNDistinct(rapid.SampledFrom(keys), 1, 3, rapid.ID).Draw(rt, "keys")
				slices.Sort(set)
				req := lease.AcquireRequest{Owner: "o", Nonce: rapid.SampledFrom(nonces).Draw(rt, "nonce"), TTL: ttl(rt)}
				if tok, err := b.AcquireSet(ctx, set, req); err == nil {
					grants = append(grants, held{a: lease.Acquisition{Owner: "o", Nonce: req.Nonce, Token: tok}, keys: set, token: tok})
				}
			},
			"renew": func(rt *rapid.T) {
				if len(grants) == 0 {
					rt.Skip("nothing granted")
				}
				defer tick()
				g := pick(rt)
				if g.keys != nil {
					_ = b.RenewSet(ctx, g.keys, g.a, ttl(rt))
					return
				}
				_ = b.Renew(ctx, g.a, ttl(rt))
			},
			"release": func(rt *rapid.T) {
				if len(grants) == 0 {
					rt.Skip("nothing granted")
				}
				defer tick()
				g := pick(rt)
				if g.keys != nil {
					_ = b.ReleaseSet(ctx, g.keys, g.a)
					return
				}
				_ = b.Release(ctx, g.a)
			},
			"write": func(rt *rapid.T) {
				if len(grants) == 0 {
					rt.Skip("nothing granted")
				}
				defer tick()
				g := pick(rt)
				key, fence, handle := g.a.Key, "", g.a.Key
				switch {
				case g.keys != nil:
					key, fence, handle = rapid.SampledFrom(g.keys).Draw(rt, "set key"), chaos.FenceSet, strings.Join(g.keys, ",")
				case g.sem != "" && rapid.Bool().Draw(rt, "per semaphore"):
					key, fence = g.sem, chaos.FenceSemaphore
				case g.sem != "":
					fence = chaos.FenceSlot
				}
				value := ""
				if rapid.Bool().Draw(rt, "not a claim") {
					values++
					value = fmt.Sprintf("v%d", values)
				}
				snap := lease.Snapshot{Key: key, Owner: "o", Token: max(g.a.Token, 1)}
				_, _ = store.Write(ctx, lane, chaos.Write{Snap: snap, Acq: chaos.AcqID(g.a.Nonce), Resource: chaos.Resource(key),
					Value: value, Lease: handle, Fence: fence})
			},
			"read": func(rt *rapid.T) {
				defer tick()
				key := rapid.SampledFrom(append(slices.Clone(keys), "s", "s/permit/0", "s/permit/1", "s/permit/2")).Draw(rt, "key")
				_, _, _ = store.Read(ctx, lane, chaos.Resource(key))
			},
			"advance": func(rt *rapid.T) {
				d := time.Duration(rapid.IntRange(1, 1500).Draw(rt, "ms")) * time.Millisecond
				op := chaos.Op{Kind: chaos.KindClock, Fault: "clock +" + d.String(), Outcome: chaos.OK, Call: rec.Now()}
				clock.Advance(d)
				op.Return = rec.Now()
				rec.Add(op)
			},
		})
		if res := chaos.Check(rec.Ops(), chaos.CheckOptions{Name: "TestMemoryPrimitivesModel"}); !res.OK() {
			rt.Fatalf("the model refused the memory backend's history: %v", res)
		}
	})
}

// runMemoryPrimitives runs the goroutine harness for d on a memory
// backend with the primitives' workload, with n permits, and returns the
// history.
func runMemoryPrimitives(t *testing.T, b lease.Backend, n int, d time.Duration) []chaos.Op {
	t.Helper()
	rec := chaos.NewRecorder(nil)
	h := chaos.NewHarness(rec, chaos.Options{
		Keys: keys, Policy: shortPolicy(t, 200*time.Millisecond), Clients: 4, Open: memoryOpen(b, &chaos.MemoryStore{}),
		Semaphore: semaphore, Permits: n, SetSize: setSize,
	})
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
	if err := h.Stop(); err != nil {
		t.Error(err)
	}
	if err := h.Converge(ctxT(t), 5*time.Second); err != nil {
		t.Errorf("after the run, not everything could be had again: %v", err)
	}
	return rec.Ops()
}

// TestHarnessMemoryPrimitives runs the goroutine harness with permits and
// sets on the memory backend on real time, with no fault: the history
// must check out, and every primitive must have been granted and written
// under.
func TestHarnessMemoryPrimitives(t *testing.T) {
	ops := runMemoryPrimitives(t, leasememory.New(leasememory.Options{}), permits, time.Second)
	res := chaos.Check(ops, chaos.CheckOptions{Name: t.Name()})
	t.Logf("chaos-summary %s: %v", t.Name(), res)
	if !res.OK() {
		t.Fatal(res)
	}
	requireWorkload(t, res)
}

// requireWorkload fails t unless permits and sets were granted, and
// writes fenced per slot, per semaphore and by a set's key accepted.
func requireWorkload(t *testing.T, res chaos.Result) {
	t.Helper()
	c := res.Counts
	if c.Permits.Granted == 0 || c.Sets.Granted == 0 || c.Leases.Granted == 0 {
		t.Errorf("not every primitive was granted: %v", c)
	}
	for _, f := range []string{chaos.FenceSlot, chaos.FenceSemaphore, chaos.FenceSet} {
		if c.Writes[f].Accepted == 0 {
			t.Errorf("no write fenced %s accepted: %v", f, c)
		}
	}
}

// TestPermitsAndSets runs permits and sets under the faults of the
// matrix. The clients (three goroutines and the child process) take, each
// round at random, a lease on one of three keys, a permit of a semaphore
// of two permits (writing per slot or per semaphore), or a set of two of
// the keys (writing to each key's resource with the set's token), so
// sets and leases contend for the same keys. The nemesis goes round its
// faults, each at least once however short the row:
//
//   - valkey: the child stopped (SIGSTOP) while it holds something until
//     another client has written over it; a partition (blackhole) and
//     lost replies through a proxy; kill -9 of the lease server and a
//     restart without persistence (marked as losing data; the fences on
//     another server);
//   - valkey-aof: the child stopped; kill -9 and a restart on the
//     append-only file (no data lost: the model holds the server to every
//     permit and set it acknowledged);
//   - postgres: the child stopped; a partition and lost replies; a crash
//     (stop -m immediate) and recovery from the WAL;
//   - valkey-failover: the failovers of TestValkeyFailover (marked as
//     losing data; the fences on a third server);
//   - postgres-failover: those of TestPostgresFailover (marked as losing
//     data, the fences' included), whose count of what the promoted
//     server lacked sees a set's operations split per key.
//
// The failover rows also check that, asked among one permit fewer, the
// history shows a broken semaphore (see run.semaphoreBroken).
//
// The checker's model treats a permit as a lease on its permit key and a
// set as holding each of its keys; beside it, no semaphore may have more
// than its two permits held at once by the backend's clock, and permit
// tokens must rise across the semaphore. Late writes of the child must be
// refused once a newer holder wrote.
func TestPermitsAndSets(t *testing.T) {
	t.Run("valkey", func(t *testing.T) {
		t.Parallel()
		srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
		p := newProxy(t, srv.Addr())
		target := valkeyTarget(p.Addr())
		target.FenceAddr = testserver.Valkey(t).Addr()
		r := startRun(t, target, rowOptions{primitives: true})
		primitivesRow(t, r, []fault{pauseHolder(r), blackhole(p), repliesLost(p), killValkey(srv, true)}, rowOptions{unknowns: true, deadlines: true})
		r.withoutDataLoss()
	})
	t.Run("valkey-aof", func(t *testing.T) {
		t.Parallel()
		srv := testserver.StartValkey(t, testserver.ValkeyOptions{AppendOnly: true})
		r := startRun(t, valkeyTarget(srv.Addr()), rowOptions{primitives: true})
		primitivesRow(t, r, []fault{pauseHolder(r), killValkey(srv, false)}, rowOptions{deadlines: true})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		srv := testserver.StartPostgres(t)
		p := newProxy(t, srv.Addr())
		target := chaos.Target{Kind: "postgres", URL: onServer(t, migrate(t, srv.NewDatabase(t)), p.Addr())}
		r := startRun(t, target, rowOptions{primitives: true})
		primitivesRow(t, r, []fault{pauseHolder(r), blackhole(p), repliesLost(p), crashPostgres(srv)}, rowOptions{unknowns: true, deadlines: true})
	})
	t.Run("valkey-failover", func(t *testing.T) {
		t.Parallel()
		pair, target := startValkeyPair(t)
		r := startRun(t, target, rowOptions{primitives: true})
		primitivesRow(t, r, []fault{{"failovers", pair.failOver}}, rowOptions{deadlines: true})
		r.withoutDataLoss()
		r.semaphoreBroken()
	})
	t.Run("postgres-failover", func(t *testing.T) {
		t.Parallel()
		postgresFailoverRow(t, rowOptions{primitives: true, deadlines: true})
	})
}

// A fault is one kind of fault of a primitives row: inject injects it
// once, recorded as a fault of r.
type fault struct {
	name   string
	inject func(t *testing.T, r *run)
}

// primitivesRow goes round faults, with a pause of 0.2–0.5 TTL before
// each, until the row's time is up and every fault ran at least once,
// then finishes r with o and checks the child's late writes and the
// workload.
func primitivesRow(t *testing.T, r *run, faults []fault, o rowOptions) {
	injected := map[string]int{}
	for n := 0; n < len(faults) || r.running() || o.unknowns && r.runningForUnknowns(); n++ {
		r.pause(ttl/5, ttl/2)
		f := faults[n%len(faults)]
		f.inject(t, r)
		injected[f.name]++
	}
	res := r.finish(o)
	late, stale := checkLateWrites(t, r.rec.Ops())
	var done []string
	for _, f := range faults {
		done = append(done, fmt.Sprintf("%d %s", injected[f.name], f.name))
	}
	t.Logf("faults: %s; %d late writes of the child, %d of them refused as stale", strings.Join(done, ", "), late, stale)
	requireWorkload(t, res)
}

// pauseHolder stops the child with SIGSTOP while it holds a lease, a
// permit or a set (waiting up to a TTL for it to hold one), until another
// client has written with a higher token to a resource it may write to,
// or 5 TTLs, and up to half a TTL more.
func pauseHolder(r *run) fault {
	h := newHoldings(r.rec)
	return fault{"child pauses", func(t *testing.T, r *run) {
		var g chaos.Op
		for deadline := time.Now().Add(ttl); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var ok bool
			if g, ok = h.any(); ok {
				break
			}
		}
		what := "the child"
		if g.Key != "" {
			what = fmt.Sprintf("the child holding %s/%d until it is superseded", g.Key, g.Token)
		}
		r.h.Fault("SIGSTOP "+what, false, func() {
			if err := r.child.Pause(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = r.child.Resume() }()
			deadline := time.Now().Add(5 * ttl)
			for g.Key != "" && !h.claimedAbove(g) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if g.Key == "" {
				time.Sleep(ttl)
			}
			time.Sleep(time.Duration(r.rng.Int64N(int64(ttl / 2))))
		})
	}}
}

// blackhole drops every byte through p, both ways, for 1–1.5 TTLs.
func blackhole(p *chaos.Proxy) fault {
	return fault{"partitions", func(t *testing.T, r *run) {
		d := ttl + time.Duration(r.rng.Int64N(int64(ttl/2)))
		r.h.Fault(fmt.Sprintf("blackhole for %v", d), false, func() {
			toxic(t, p, chaos.Both("timeout", map[string]any{"timeout": 0})...)
			defer heal(t, p)
			time.Sleep(d)
		})
	}}
}

// repliesLost drops the replies through p, delivering the requests, for
// 1–1.5 TTLs.
func repliesLost(p *chaos.Proxy) fault {
	return fault{"reply losses", func(t *testing.T, r *run) {
		d := ttl + time.Duration(r.rng.Int64N(int64(ttl/2)))
		r.h.Fault(fmt.Sprintf("replies dropped (downstream blackhole) for %v", d), false, func() {
			toxic(t, p, chaos.Toxic{Type: "timeout", Stream: "downstream", Attributes: map[string]any{"timeout": 0}})
			defer heal(t, p)
			time.Sleep(d)
		})
	}}
}

// killValkey kills srv with SIGKILL and restarts it after 0–0.5 TTL:
// empty (marked as losing data) unless it persists (lostData false, an
// AOF server).
func killValkey(srv *testserver.ValkeyServer, lostData bool) fault {
	name, how := "kills (AOF)", "on its AOF"
	if lostData {
		name, how = "kills (no persistence)", "empty"
	}
	return fault{name, func(t *testing.T, r *run) {
		d := time.Duration(r.rng.Int64N(int64(ttl / 2)))
		r.h.Fault(fmt.Sprintf("kill -9 valkey-server, restart it %s after %v", how, d), lostData, func() {
			srv.Kill()
			time.Sleep(d)
			srv.Restart()
		})
	}}
}

// crashPostgres stops srv as a crash does and starts it after 0–0.5 TTL.
func crashPostgres(srv *testserver.PostgresServer) fault {
	return fault{"crashes", func(t *testing.T, r *run) {
		d := time.Duration(r.rng.Int64N(int64(ttl / 2)))
		r.h.Fault(fmt.Sprintf("stop postgres -m immediate, start it after %v", d), false, func() {
			srv.StopImmediate()
			time.Sleep(d)
			srv.Start()
		})
	}}
}

// brokenSemaphore wraps a backend with a semaphore that breaks its bound:
// ignoring the number of permits, it grants among two more; or, when
// every permit is held, it takes slot 0 from its holder behind its back
// (a forced release the history does not see) and grants it again.
type brokenSemaphore struct {
	lease.Backend
	steal bool
	mu    sync.Mutex    // one steal at a time
	over  *atomic.Int64 // if not nil, counts the grants of a slot at or above the number asked
}

func (b *brokenSemaphore) AcquirePermit(ctx context.Context, r lease.AcquireRequest, permits int) (int, lease.Token, error) {
	pa, ok := b.Backend.(lease.PermitAcquirer)
	fr, ok2 := b.Backend.(lease.ForceReleaser)
	if !ok || !ok2 {
		return 0, 0, lease.Misconfigured(fmt.Errorf("%w: %T has no semaphores", errors.ErrUnsupported, b.Backend))
	}
	if !b.steal {
		slot, tok, err := pa.AcquirePermit(ctx, r, permits+2)
		if err == nil && slot >= permits && b.over != nil {
			b.over.Add(1)
		}
		return slot, tok, err
	}
	slot, tok, err := pa.AcquirePermit(ctx, r, permits)
	if !errors.Is(err, lease.ErrNotAcquired) {
		return slot, tok, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := fr.ForceRelease(ctx, lease.PermitKey(r.Key, 0), 0); err != nil {
		return 0, 0, err
	}
	return pa.AcquirePermit(ctx, r, permits)
}

// The broken semaphore hands the set calls through.
func (b *brokenSemaphore) sets() (lease.SetAcquirer, error) {
	if sa, ok := b.Backend.(lease.SetAcquirer); ok {
		return sa, nil
	}
	return nil, lease.Misconfigured(fmt.Errorf("%w: %T has no sets", errors.ErrUnsupported, b.Backend))
}

func (b *brokenSemaphore) AcquireSet(ctx context.Context, keys []string, r lease.AcquireRequest) (lease.Token, error) {
	sa, err := b.sets()
	if err != nil {
		return 0, err
	}
	return sa.AcquireSet(ctx, keys, r)
}

func (b *brokenSemaphore) RenewSet(ctx context.Context, keys []string, a lease.Acquisition, ttl time.Duration) error {
	sa, err := b.sets()
	if err != nil {
		return err
	}
	return sa.RenewSet(ctx, keys, a, ttl)
}

func (b *brokenSemaphore) ReleaseSet(ctx context.Context, keys []string, a lease.Acquisition) error {
	sa, err := b.sets()
	if err != nil {
		return err
	}
	return sa.ReleaseSet(ctx, keys, a)
}

func (b *brokenSemaphore) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if w, ok := b.Backend.(lease.ReleaseWatcher); ok {
		return w.WatchReleases(ctx, key)
	}
	return nil, nil, errors.New("no release watch")
}

// TestCheckerCatchesBrokenSemaphore runs the primitives' workload on
// semaphores broken on purpose, and the checker must refuse the history:
// one that ignores its number of permits (the semaphore's bound is
// broken), and one that grants a held slot again (two holders of one
// permit key). On the memory backend both; on Valkey, in the short form,
// the first, with the goroutine clients of a row through the broken
// semaphore (the child's is sound); in the long form on PostgreSQL too.
func TestCheckerCatchesBrokenSemaphore(t *testing.T) {
	t.Parallel()
	for _, steal := range []bool{false, true} {
		name := map[bool]string{false: "ignores its number", true: "grants a held slot again"}[steal]
		t.Run(name+"/memory", func(t *testing.T) {
			t.Parallel()
			ops := runMemoryPrimitives(t, &brokenSemaphore{Backend: leasememory.New(leasememory.Options{}), steal: steal}, 1, time.Second)
			res := chaos.Check(ops, chaos.CheckOptions{Name: t.Name(), NoFiles: true})
			if res.OK() {
				t.Fatalf("the checker accepted the history of a semaphore that %s: %v", name, res)
			}
			t.Logf("refused, as it should be: %s; the first: %s", kinds(res.Problems), res.Problems[0])
			if !steal && !slices.ContainsFunc(res.Problems, func(p string) bool { return strings.Contains(p, "permits held at once") }) {
				t.Errorf("the semaphore's bound was not reported broken: %v", res.Problems)
			}
		})
	}
	for i, b := range networkBackends {
		if i > 0 && !long() {
			break // the short form shows the failure on one backend; the long form on all
		}
		t.Run("ignores its number/"+b.name, func(t *testing.T) {
			t.Parallel()
			target, _, _ := b.target(t)
			var over atomic.Int64
			r := startRun(t, target, rowOptions{primitives: true, permits: 1, wrap: func(b lease.Backend) lease.Backend {
				return &brokenSemaphore{Backend: b, over: &over}
			}})
			// The broken semaphore shows only when two permits are wanted
			// at once, which a quiet machine may not bring about in a
			// short row: run on until it has granted a permit too many.
			for start := time.Now(); r.running() || over.Load() == 0 && time.Since(start) < time.Minute; {
				time.Sleep(50 * time.Millisecond)
			}
			if over.Load() == 0 {
				t.Fatal("in a minute the broken semaphore never granted a permit beyond its number: the workload no longer contends for permits")
			}
			if err := r.child.Stop(30 * time.Second); err != nil {
				t.Error(err)
			}
			r.childDone = true
			if err := r.h.Stop(); err != nil {
				t.Error(err)
			}
			res := chaos.Check(r.rec.Ops(), chaos.CheckOptions{Name: t.Name(), NoFiles: true, ModelOptions: chaos.ModelOptions{ClockTokens: true}})
			if res.OK() {
				t.Fatalf("a semaphore that ignores its number of permits went unnoticed: %v", res)
			}
			if !slices.ContainsFunc(res.Problems, func(p string) bool { return strings.Contains(p, "semaphore "+semaphore+":") }) {
				t.Errorf("the semaphore's bound was not reported broken: %v", res.Problems)
			}
			t.Logf("the checker refuses the history, as it should: %s; the first: %s", kinds(res.Problems), res.Problems[0])
		})
	}
}

// kinds sums up the problems a check found by kind.
func kinds(problems []string) string {
	n := func(part string) int {
		return len(slices.DeleteFunc(slices.Clone(problems), func(p string) bool { return !strings.Contains(p, part) }))
	}
	return fmt.Sprintf("%d problems (%d grants of a slot out of range, %d semaphores with more permits held at once than their number, %d keys not linearizable)",
		len(problems), n("out of range"), n("held at once"), n("not linearizable"))
}
