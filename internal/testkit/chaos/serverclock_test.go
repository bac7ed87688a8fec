package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// clockShim is the source of the library that steps a server's clock.
var clockShim = filepath.Join("testdata", "clockshim.c")

// serverClock steps the wall clock of one server process, and of nothing
// else: the server runs with testdata/clockshim.c preloaded, which adds
// the offset a file holds to every reading of the wall clock
// (clock_gettime of CLOCK_REALTIME and CLOCK_REALTIME_COARSE,
// gettimeofday, time) and reads the file on every call, so a step takes
// effect the moment the file is replaced. The monotonic clock is left
// alone, as an NTP step leaves it.
//
// The shim serves Valkey and PostgreSQL alike. It stands in for Debian's
// libfaketime, which can't be preloaded into Debian's valkey-server:
// that server is linked with jemalloc, and libfaketime 0.9.10 aborts it
// at start with "Unexpected recursive calls to clock_gettime()".
type serverClock struct {
	lib    string // the shim, built for this clock
	file   string // the offset file
	offset time.Duration
}

// newServerClock builds the shim with the C compiler (cc) and returns a
// clock with offset 0. It skips the test without a compiler that builds
// the shim, or fails it under LEASE_REQUIRE_SERVERS=1.
func newServerClock(t *testing.T) *serverClock {
	t.Helper()
	unavailable := func(msg string) {
		t.Helper()
		msg += "; the server clock rows build " + clockShim + " with it (scripts/install-deps.sh servers installs gcc)"
		if os.Getenv("LEASE_REQUIRE_SERVERS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		unavailable(fmt.Sprintf("no C compiler: %v", err))
	}
	// The postgres user must read the shim and the file when the tests run
	// as root.
	dir, err := os.MkdirTemp("", "chaos-clockshim-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &serverClock{lib: filepath.Join(dir, "clockshim.so"), file: filepath.Join(dir, "offset")}
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", c.lib, clockShim, "-ldl").CombinedOutput()
	if err != nil {
		unavailable(fmt.Sprintf("%s can't build %s: %v\n%s", cc, clockShim, err, out))
	}
	c.write(t, 0)
	return c
}

// env is the server's environment that fakes its clock.
func (c *serverClock) env() []string {
	return []string{"LD_PRELOAD=" + c.lib, "CLOCKSHIM_OFFSET_FILE=" + c.file}
}

// write makes the server's clock run offset ahead of the real one (behind
// if negative), in whole seconds.
func (c *serverClock) write(t *testing.T, offset time.Duration) {
	t.Helper()
	tmp := c.file + ".new"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%+d\n", int64(offset/time.Second)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, c.file); err != nil {
		t.Fatal(err)
	}
	c.offset = offset
}

// step moves the server's clock to offset, recording the step as a fault
// of r's history: a forward step by more than the TTL ends every lease on
// the backend's clock at once.
func (c *serverClock) step(t *testing.T, r *run, offset time.Duration) {
	t.Helper()
	d := offset - c.offset
	op := chaos.Op{Fault: fmt.Sprintf("server clock stepped %+v (now %+v)", d, offset), EndsLeases: d > 0}
	r.h.FaultOp(op, func() { c.write(t, offset) })
}

// startSteppedValkey starts a dedicated Valkey server, without
// persistence, whose clock clk steps.
func startSteppedValkey(t *testing.T, clk *serverClock) *testserver.ValkeyServer {
	t.Helper()
	return testserver.StartValkey(t, testserver.ValkeyOptions{Env: clk.env()})
}

// startSteppedPostgres starts a dedicated PostgreSQL server whose clock
// clk steps, and returns the URL of a fresh, migrated database on it.
func startSteppedPostgres(t *testing.T, clk *serverClock) string {
	t.Helper()
	srv := testserver.StartPostgresWith(t, testserver.PostgresOptions{Env: clk.env()})
	return migrate(t, srv.NewDatabase(t))
}

// steppedTargets start, for each kind of server, a dedicated one whose
// clock clk steps and return a target on it; the fences live on the same
// server as the leases, so their clock is stepped too.
var steppedTargets = []struct {
	name  string
	start func(t *testing.T, clk *serverClock) chaos.Target
}{
	{"valkey", func(t *testing.T, clk *serverClock) chaos.Target {
		return valkeyTarget(startSteppedValkey(t, clk).Addr())
	}},
	{"postgres", func(t *testing.T, clk *serverClock) chaos.Target {
		return chaos.Target{Kind: "postgres", URL: startSteppedPostgres(t, clk)}
	}},
}

// TestServerClockSteps steps the server's clock (only the server
// process's) forward and back by two to four TTLs, again and again: from
// the true time to a step away and back. A forward step ends every lease
// on the backend at once while its holder's local deadline is still
// ahead (the step is marked as ending leases, which the model then
// allows); a backward step lengthens them. What must hold: no token is
// issued twice and tokens keep rising (the data survives the steps), and
// the fence refuses every stale write, also while two clients believe
// they hold one lease. Tokens are not held to the wall clock here
// (ClockTokens off): they follow the server's. The row checks its history
// a second time without the marks and logs that the checker then finds
// leases a step ended early: the steps took.
func TestServerClockSteps(t *testing.T) {
	t.Parallel() // its servers are its own, and nothing in it is timed
	for _, s := range steppedTargets {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			clk := newServerClock(t)
			serverClockSteps(t, clk, s.start(t, clk))
		})
	}
}

// serverClockSteps runs the row on target, whose server's clock clk
// steps.
func serverClockSteps(t *testing.T, clk *serverClock, target chaos.Target) {
	o := rowOptions{steppedClock: true}
	r := startRun(t, target, o)
	forward, back := 0, 0
	step := func(offset time.Duration) {
		if offset > clk.offset {
			forward++
		} else {
			back++
		}
		clk.step(t, r, offset)
	}
	for r.running() {
		r.pause(300*time.Millisecond, ttl)
		next := time.Duration(0)
		if clk.offset == 0 {
			next = time.Duration(2+r.rng.IntN(3)) * ttl
			if r.rng.IntN(2) == 0 {
				next = -next
			}
		}
		step(next)
	}
	if clk.offset != 0 {
		step(0)
	}
	res := r.finish(o)
	ops := r.rec.Ops()
	stale := count(ops, func(op chaos.Op) bool { return op.Kind == chaos.KindWrite && op.Outcome == chaos.Stale })
	t.Logf("%s: %d clock steps (%d forward, %d back); %d stale writes refused; %d operations checked",
		target.Kind, forward+back, forward, back, stale, res.Checked)
	// Without the marks on the forward steps the checker should find
	// leases that a step ended early: the steps took.
	for i := range ops {
		ops[i].EndsLeases = false
	}
	if unmarked := chaos.Check(ops, chaos.CheckOptions{NoFiles: true}); unmarked.OK() {
		t.Log("without the marks on the forward steps the history still checks out: no step ended a lease early this time")
	} else {
		t.Logf("without the marks on the forward steps the checker refuses the history, as it should: %d partitions show a lease that a step ended early",
			len(unmarked.Problems))
	}
}

// TestServerClockForwardOverlap measures what a forward step of the
// server's clock does to a holder: with a TTL of 10 s, a step of 10 s
// ends the lease on the backend at once, and another client acquires it
// while the first one's local deadline is still ahead. The fence then
// refuses the first holder's writes once the second has claimed the
// resource. docs/semantics.md quotes the figure this test logs.
func TestServerClockForwardOverlap(t *testing.T) {
	t.Parallel()
	for _, c := range steppedTargets {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			clk := newServerClock(t)
			target := c.start(t, clk)
			p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			clients := make([]*lease.Client, 2)
			stores := make([]chaos.Store, 2)
			for i := range clients {
				b, s, closeFn, err := target.Open(ctx, fmt.Sprintf("chaos-overlap-%d", i))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(closeFn)
				if clients[i], err = lease.NewClient(b, lease.ClientOptions{Owner: fmt.Sprintf("holder-%d", i)}); err != nil {
					t.Fatal(err)
				}
				stores[i] = s
			}
			first, err := clients[0].Acquire(ctx, "k1", p)
			if err != nil {
				t.Fatal(err)
			}
			if err := stores[0].Write(ctx, first.Snapshot(), chaos.Resource("k1"), "first"); err != nil {
				t.Fatal(err)
			}
			clk.write(t, 10*time.Second)
			second, err := clients[1].TryAcquire(ctx, "k1", p)
			if err != nil {
				t.Fatalf("after a 10 s forward step of the server's clock, the lease of TTL 10 s was not free: %v", err)
			}
			overlap := time.Until(first.Deadline())
			t.Logf("%s: a 10 s forward step of the server's clock ended a 10 s lease (safety margin %v) at once: token %d was granted while the previous holder's local deadline was %v ahead",
				c.name, p.Options().SafetyMargin, second.Token(), overlap.Round(time.Millisecond))
			if overlap <= 0 {
				t.Errorf("the first holder's local deadline had passed (%v): no overlap to measure", overlap)
			}
			if err := stores[1].Write(ctx, second.Snapshot(), chaos.Resource("k1"), ""); err != nil {
				t.Fatal(err)
			}
			err = stores[0].Write(ctx, first.Snapshot(), chaos.Resource("k1"), "first again")
			if !errors.Is(err, fence.ErrStale) {
				t.Fatalf("the first holder's write after the second claimed the resource: %v, want fence.ErrStale", err)
			}
		})
	}
}

// TestServerClockBackAndDataLoss shows what is not guaranteed and that it
// is reported: the server's clock steps back by 10 TTLs, then the server
// forgets its leases: Valkey is killed and restarted without persistence,
// and PostgreSQL's lease table is emptied, as a restore of an old backup
// would leave it. The next token for a key, max(last+1, the server's
// clock in µs) with "last" forgotten, is below the tokens issued before.
// The model reports it, and the fence, which kept its data (on Valkey it
// lives on another server), refuses the new holder's writes as stale until
// the server's clock passes the old tokens: safety holds, the key is
// unusable meanwhile.
func TestServerClockBackAndDataLoss(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// start starts the server and returns a target on it, what the
		// server loses and a function that makes it lose that.
		start func(t *testing.T, clk *serverClock) (chaos.Target, string, func())
	}{
		{"valkey", func(t *testing.T, clk *serverClock) (chaos.Target, string, func()) {
			srv := startSteppedValkey(t, clk)
			target := valkeyTarget(srv.Addr())
			target.FenceAddr = testserver.Valkey(t).Addr()
			return target, "valkey-server killed and restarted without persistence: every lease forgotten", func() {
				srv.Kill()
				srv.Restart()
			}
		}},
		{"postgres", func(t *testing.T, clk *serverClock) (chaos.Target, string, func()) {
			url := startSteppedPostgres(t, clk)
			admin, err := chaos.Pool(context.Background(), url, "chaos-admin", 1)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(admin.Close)
			return chaos.Target{Kind: "postgres", URL: url}, "the lease table emptied, as by a restore of an old backup", func() {
				if _, err := admin.Exec(context.Background(), `TRUNCATE public.leases`); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clk := newServerClock(t)
			target, loss, lose := c.start(t, clk)
			serverClockBackAndDataLoss(t, clk, target, loss, lose)
		})
	}
}

// serverClockBackAndDataLoss steps the clock of target's server back by
// 10 TTLs, then makes it lose its leases (the fault loss, injected by
// lose), and checks that the lower token this brings is reported and
// fenced out.
func serverClockBackAndDataLoss(t *testing.T, clk *serverClock, target chaos.Target, loss string, lose func()) {
	ctx := context.Background()
	rec := chaos.NewRecorder(nil)
	lanes := chaos.NewLanes("p")
	p := rowPolicy(t)
	hold := func(name string) (*lease.Handle, *chaos.Lane, *chaos.RecordingStore) {
		lane := lanes.New()
		b, s, closeFn, err := target.Open(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeFn)
		c, err := lease.NewClient(chaos.NewRecordingBackend(b, rec, lane), lease.ClientOptions{Owner: name})
		if err != nil {
			t.Fatal(err)
		}
		h, err := c.Acquire(chaos.WithLane(ctx, lane), "k1", p)
		if err != nil {
			t.Fatal(err)
		}
		return h, lane, chaos.NewRecordingStore(s, rec)
	}
	before, lane, store := hold("before")
	if out, err := store.Write(ctx, lane, chaos.Write{Snap: before.Snapshot(), Acq: lane.Granted(), Resource: chaos.Resource("k1"), Value: "v1"}); out != chaos.OK {
		t.Fatal(out, err)
	}
	fault := func(op chaos.Op, inject func()) {
		op.Kind, op.Outcome, op.Call = chaos.KindFault, chaos.OK, rec.Now()
		inject()
		op.Return = rec.Now()
		rec.Add(op)
	}
	fault(chaos.Op{Fault: "server clock stepped back 10 TTLs"}, func() { clk.write(t, -10*ttl) })
	fault(chaos.Op{Fault: loss, LostData: true}, lose)
	after, lane, store := hold("after")
	t.Logf("%s: token before the step and the loss: %d; after: %d (%v lower)", target.Kind, before.Token(), after.Token(),
		time.Duration(int64(before.Token())-int64(after.Token()))*time.Microsecond)
	if after.Token() >= before.Token() {
		t.Fatalf("token %d after a backward step of %v and data loss is not below %d: the step did not take", after.Token(), 10*ttl, before.Token())
	}
	out, err := store.Write(ctx, lane, chaos.Write{Snap: after.Snapshot(), Acq: lane.Granted(), Resource: chaos.Resource("k1"), Value: "v2"})
	if out != chaos.Stale {
		t.Errorf("the new holder's write with the lower token: %s (%v), want it refused as stale", out, err)
	}
	res := chaos.Check(rec.Ops(), chaos.CheckOptions{Name: t.Name(), ModelOptions: chaos.ModelOptions{ClockTokens: false}, NoFiles: true})
	t.Log(res)
	if res.OK() || !strings.HasPrefix(res.Problems[0], "lease k1") {
		t.Fatal("the checker did not report the lower token")
	}
}

// TestServerClockBackAfterSweep measures the exposure that a retention
// leaves, as docs/semantics.md states it: a store that removed the record
// of an ended lease still issues a higher token next, because tokens are
// seeded from its clock, as long as its clock has not stepped back by more
// than the time since that record's last token was issued, which is at
// least the retention. The row removes a record (retention 3 s) and steps
// the server's clock back twice: by 2 s, within the retention, after which
// the next token is still higher; and by 8 s, beyond it, after which the
// next token is lower. Then the fence that saw the higher token refuses the
// new holder (safe, but the resource is unusable until the clock passes
// the old token), and on a resource the new holder writes first, the old
// holder's later write with its higher token is accepted: the stale write
// that the retention exists to make unlikely.
func TestServerClockBackAfterSweep(t *testing.T) {
	t.Parallel()
	for _, c := range steppedTargets {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clk := newServerClock(t)
			target := c.start(t, clk)
			target.Retention = 3 * time.Second
			serverClockBackAfterSweep(t, clk, target)
		})
	}
}

func serverClockBackAfterSweep(t *testing.T, clk *serverClock, target chaos.Target) {
	ctx := ctxT(t)
	b, store, closeFn, err := target.Open(ctx, "chaos-sweep-clock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	sweeper, ok := b.(lease.Sweeper)
	if !ok {
		t.Fatalf("%T is not a lease.Sweeper", b)
	}
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "holder", SweepEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	p := rowPolicy(t)
	// used acquires key, writes its resource and releases it, then lets
	// the retention pass and sweeps, so that key has no record.
	used := func(key string) *lease.Handle {
		t.Helper()
		h, err := c.Acquire(ctx, key, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Write(ctx, h.Snapshot(), chaos.Resource(key), "old"); err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(target.Retention + 500*time.Millisecond)
		for cursor := ""; ; {
			page, err := sweeper.Sweep(ctx, lease.SweepOptions{Cursor: cursor, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if cursor = page.Next; cursor == "" {
				break
			}
		}
		if r, err := b.Inspect(ctx, key); err != nil || r.Token != 0 {
			t.Fatalf("Inspect(%q) a retention after its release and a sweep = %+v, %v; want no record", key, r, err)
		}
		return h
	}

	// Within the retention: still higher.
	old := used("k1")
	clk.write(t, -2*time.Second)
	next, err := c.Acquire(ctx, "k1", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: record removed, clock stepped back 2 s (retention %v): token %d after %d", target.Kind, target.Retention, next.Token(), old.Token())
	if next.Token() <= old.Token() {
		t.Errorf("a backward step of 2 s, within the retention of %v, brought token %d after %d: the retention does not hold", target.Retention, next.Token(), old.Token())
	}
	if err := store.Write(ctx, next.Snapshot(), chaos.Resource("k1"), "new"); err != nil {
		t.Errorf("the next holder's write after a step within the retention: %v", err)
	}
	_ = next.Release(ctx)
	clk.write(t, 0)

	// Beyond the retention: lower, and what that costs.
	old = used("k2")
	clk.write(t, -8*time.Second)
	defer clk.write(t, 0)
	next, err = c.Acquire(ctx, "k2", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: record removed, clock stepped back 8 s (retention %v): token %d after %d (%v lower)", target.Kind, target.Retention,
		next.Token(), old.Token(), time.Duration(int64(old.Token())-int64(next.Token()))*time.Microsecond)
	if next.Token() >= old.Token() {
		t.Fatalf("a backward step of 8 s, beyond the retention of %v, brought token %d after %d: the row did not reach the exposure", target.Retention, next.Token(), old.Token())
	}
	err = store.Write(ctx, next.Snapshot(), chaos.Resource("k2"), "new")
	if !errors.Is(err, fence.ErrStale) {
		t.Errorf("the new holder's write to a resource the old token wrote: %v, want fence.ErrStale (the fence kept the higher token)", err)
	}
	fresh := chaos.Resource("k2") + "-fresh"
	if err := store.Write(ctx, next.Snapshot(), fresh, "new"); err != nil {
		t.Fatalf("the new holder's write to a fresh resource: %v", err)
	}
	err = store.Write(ctx, old.Snapshot(), fresh, "stale")
	t.Logf("%s: the old holder's later write to that fresh resource with its higher token: %v", target.Kind, err)
	if err != nil {
		t.Errorf("the old holder's write with the higher token was refused (%v); docs/semantics.md says it is accepted past the retention", err)
	}
}
