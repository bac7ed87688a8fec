package chaos_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// EnvDuration names the variable that sets, as a Go duration, how long the
// fault rows run in all: `make chaos DURATION=10m` sets it. Each row gets
// an equal share. Unset, each row runs for shortRow, which keeps the
// matrix within about two minutes on two loaded cores with -race.
const EnvDuration = "LEASE_CHAOS_DURATION"

// rows is the number of fault rows that share LEASE_CHAOS_DURATION: the
// tests that call rowDuration, counting the parallel subtests of one test
// once.
const rows = 28

const shortRow = 3 * time.Second

// rowDuration returns how long a fault row runs its workload.
func rowDuration(t testing.TB) time.Duration {
	t.Helper()
	v := os.Getenv(EnvDuration)
	if v == "" {
		return shortRow
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 10m", EnvDuration, v)
	}
	return max(d/rows, shortRow)
}

// long reports whether the matrix runs in its long form.
func long() bool { return os.Getenv(EnvDuration) != "" }

// ttl is the lease TTL of the fault rows: long enough that a client on a
// loaded machine renews in time, short enough that a few seconds see many
// leases expire and move.
const ttl = time.Second

// rowPolicyOptions are the options of the fault rows' policy.
var rowPolicyOptions = lease.PolicyOptions{TTL: ttl, OperationTimeout: 150 * time.Millisecond,
	Retry: 50 * time.Millisecond, Wait: ttl / 3}

// rowPolicy is the policy of the fault rows.
func rowPolicy(t testing.TB) lease.Policy {
	t.Helper()
	p, err := lease.NewPolicy(rowPolicyOptions)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var keys = []string{"k1", "k2", "k3"}

var prefixes atomic.Int64

// valkeyTarget returns a target on the Valkey server at addr with a
// prefix of its own.
func valkeyTarget(addr string) chaos.Target {
	return chaos.Target{Kind: "valkey", Addr: addr, Prefix: fmt.Sprintf("chaos%d-%d:", time.Now().UnixNano()%1e6, prefixes.Add(1))}
}

// postgresDB returns a fresh, migrated database on the shared server.
func postgresDB(t *testing.T) string {
	t.Helper()
	return migrate(t, testserver.Postgres(t).NewDatabase(t))
}

// migrate creates the lease, fences and values tables in the database at
// url and returns url.
func migrate(t *testing.T, url string) string {
	t.Helper()
	ctx := ctxT(t)
	pool, err := chaos.Pool(ctx, url, "chaos-migrate", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := chaos.MigratePostgres(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var resources []string
	for _, k := range keys {
		resources = append(resources, chaos.Resource(k))
	}
	if err := chaos.MigrateColumns(ctx, pool, resources); err != nil {
		t.Fatal(err)
	}
	return url
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// run is one run of a fault row: the harness's goroutine clients and a
// child process on one target, and a nemesis in the test's goroutine.
type run struct {
	t      *testing.T
	target chaos.Target
	rec    *chaos.Recorder
	h      *chaos.Harness
	child  *chaos.Child
	policy lease.Policy
	until  time.Time
	rng    *rand.Rand

	childDone bool
}

// rowOptions configure a row.
type rowOptions struct {
	// Model options; ClockTokens is set for the network backends.
	model chaos.ModelOptions
	// clock is the goroutine clients' clock.
	clock lease.Clock
	// converge is how long each key may take to be had after the faults
	// healed. Default 20×TTL.
	converge time.Duration
	// unknowns: the row's faults must leave operations with an unknown
	// outcome in the history, or it proved nothing about them.
	unknowns bool
	// deadlines: the checker must have checked local deadlines.
	deadlines bool
	// steppedClock: the server's clock is stepped, so tokens no longer
	// bound the wall-clock time of their grant (ClockTokens is off).
	steppedClock bool
	// childTarget, if set, is where the child process's clients go
	// instead of the target of the run.
	childTarget *chaos.Target
	// stopInTxEvery: see chaos.ChildConfig.StopInTxEvery.
	stopInTxEvery int
	// keys are the lease keys of the run; default keys.
	keys []string
	// primitives makes every client take permits of a semaphore and
	// sets of keys too (see chaos.Options.Semaphore and SetSize).
	primitives bool
	// wrap, if set, wraps the goroutine clients' backends (not the
	// child's).
	wrap func(lease.Backend) lease.Backend
	// permits is the semaphore's number of permits with primitives;
	// default the constant permits.
	permits int
	// handOffs makes the goroutine clients hand leases off (see
	// chaos.Options.HandOffs) and adds an observer lane on each key;
	// finish checks the observers' last states and logs what they saw.
	handOffs bool
}

// The workload of the rows with primitives: a semaphore of two permits
// beside the keys, and sets of two of the keys.
const (
	semaphore = "sem"
	permits   = 2
	setSize   = 2
)

// startRun starts the clients of a row on target.
func startRun(t *testing.T, target chaos.Target, o rowOptions) *run {
	t.Helper()
	r := &run{t: t, target: target, rec: chaos.NewRecorder(nil), policy: rowPolicy(t),
		until: time.Now().Add(rowDuration(t)), rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))}
	runKeys := keys
	if o.keys != nil {
		runKeys = o.keys
	}
	ho := chaos.Options{Keys: runKeys, Policy: r.policy, Clients: 3, Open: target.Open,
		Clock: o.clock, Seed: r.rng.Uint64()%1000 + 1}
	cfg := chaos.ChildConfig{Name: "c1", Keys: runKeys, Policy: r.policy.Options(), StopInTxEvery: o.stopInTxEvery}
	if o.primitives {
		n := cmp.Or(o.permits, permits)
		ho.Semaphore, ho.Permits, ho.SetSize = semaphore, n, setSize
		cfg.Semaphore, cfg.Permits, cfg.SetSize = semaphore, n, setSize
	}
	if o.handOffs {
		ho.HandOffs, ho.Observers = true, 1
	}
	if o.wrap != nil {
		ho.Open = func(ctx context.Context, name string) (lease.Backend, chaos.Store, func(), error) {
			b, s, closeFn, err := target.Open(ctx, name)
			if err != nil {
				return nil, nil, nil, err
			}
			return o.wrap(b), s, closeFn, nil
		}
	}
	r.h = chaos.NewHarness(r.rec, ho)
	if err := r.h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.h.Stop()
		_ = r.h.StopObservers(context.Background(), -1)
	})
	childTarget := target
	if o.childTarget != nil {
		childTarget = *o.childTarget
	}
	cfg.Target, cfg.Seed = childTarget, r.rng.Uint64()%1000+1
	c, err := chaos.StartChild(r.rec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.child = c
	t.Cleanup(func() {
		if !r.childDone {
			_ = c.Stop(10 * time.Second)
		}
	})
	return r
}

// running reports whether the nemesis should inject another fault.
func (r *run) running() bool { return time.Now().Before(r.until) }

// maxUnknownWait is how much longer than planned a row that must leave
// unknown outcomes keeps injecting its faults while it has left none.
const maxUnknownWait = 15 * time.Second

// runningForUnknowns is running for a row whose faults must leave
// operations with an unknown outcome: while none is recorded it goes on
// up to maxUnknownWait past the planned end. A short run's few faults
// may, by chance, end every call with a known outcome (on PostgreSQL a
// timed-out call closes its connection, and the next ones mostly fail
// before they are sent); that would say nothing about the row.
func (r *run) runningForUnknowns() bool {
	if r.running() {
		return true
	}
	return r.unknowns() == 0 && time.Now().Before(r.until.Add(maxUnknownWait))
}

// unknowns counts the recorded operations with an unknown outcome.
func (r *run) unknowns() int {
	n := 0
	for _, op := range r.rec.Ops() {
		if op.Outcome == chaos.Unknown {
			n++
		}
	}
	return n
}

// pause sleeps for a random time between lo and hi.
func (r *run) pause(lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(r.rng.Int64N(int64(hi-lo)+1)))
}

// finish stops the clients, checks that every key can be had again, and
// checks the history. It returns the result for row-specific checks.
func (r *run) finish(o rowOptions) chaos.Result {
	t := r.t
	t.Helper()
	if r.child != nil {
		if err := r.child.Stop(30 * time.Second); err != nil {
			t.Error(err)
		}
		r.childDone = true
	}
	if err := r.h.Stop(); err != nil {
		t.Error(err)
	}
	if o.converge == 0 {
		o.converge = 20 * ttl
	}
	if err := r.h.Converge(ctxT(t), o.converge); err != nil {
		t.Errorf("after the faults healed, not every key could be had again: %v", err)
	}
	if o.handOffs {
		if err := r.h.StopObservers(ctxT(t), 10*time.Second); err != nil {
			t.Errorf("once quiet, an observer's last state is not the final state: %v", err)
		}
	}
	o.model.ClockTokens = r.target.Kind != "" && !o.steppedClock
	res := chaos.Check(r.rec.Ops(), chaos.CheckOptions{Name: t.Name(), ModelOptions: o.model})
	t.Logf("chaos-summary %s: %v (ran %v)", t.Name(), res, rowDuration(t))
	if !res.OK() {
		t.Errorf("the history does not check out:\n%v", res)
	}
	if res.Checked == 0 {
		t.Error("nothing was checked")
	}
	if o.unknowns {
		n := r.unknowns()
		t.Logf("%d operations with an unknown outcome", n)
		if n == 0 {
			t.Error("the faults left no operation with an unknown outcome: the row proved nothing about them")
		}
	}
	if o.handOffs {
		handOffCounts(t, r.rec.Ops())
	}
	if o.deadlines && res.Deadlines == 0 {
		t.Error("no local deadline was checked against the backend's expiry")
	}
	return res
}

// withoutDataLoss checks r's history again as if no fault had lost data,
// and logs whether the checker then finds two holders at once: it shows
// that the row's faults did take leases away from their holders, which the
// data-loss mark excuses.
func (r *run) withoutDataLoss() {
	ops := r.rec.Ops()
	for i := range ops {
		ops[i].LostData = false
	}
	res := chaos.Check(ops, chaos.CheckOptions{ModelOptions: chaos.ModelOptions{ClockTokens: true}, NoFiles: true})
	if res.OK() {
		r.t.Log("without the data-loss mark the history still checks out: no lease was held across a fault this time")
		return
	}
	r.t.Logf("without the data-loss mark the checker refuses the history, as it should: %d partitions show a lease that the fault took away", len(res.Problems))
}

// count returns the number of operations in ops that match f.
func count(ops []chaos.Op, f func(chaos.Op) bool) int {
	n := 0
	for _, op := range ops {
		if f(op) {
			n++
		}
	}
	return n
}

// lanePrefix reports whether op was issued by a lane with prefix p.
func lanePrefix(op chaos.Op, p string) bool { return strings.HasPrefix(op.Lane, p+"/") }

// semaphoreBroken checks r's history again as if every permit had been
// asked for among one permit fewer, as a semaphore that ignores its
// number by one would have granted them, and fails t unless the checker
// then refuses it with a problem of the semaphore: it shows that the
// row's faults (a failover marked as losing data) do not excuse a broken
// bound. A history with no permit granted above slot 0 proves nothing and
// is only logged.
func (r *run) semaphoreBroken() {
	t := r.t
	t.Helper()
	ops := r.rec.Ops()
	above := 0
	for i, op := range ops {
		if op.Sem == "" || op.Permits == 0 {
			continue
		}
		ops[i].Permits--
		if _, slot, ok := lease.ParsePermitKey(op.Key); ok && slot > 0 && op.Kind == chaos.KindAcquire && op.Outcome == chaos.OK {
			above++
		}
	}
	if above == 0 {
		t.Log("no permit was granted above slot 0: the history cannot show a broken semaphore")
		return
	}
	res := chaos.Check(ops, chaos.CheckOptions{ModelOptions: chaos.ModelOptions{ClockTokens: true}, NoFiles: true})
	if !slices.ContainsFunc(res.Problems, func(p string) bool { return strings.Contains(p, "semaphore "+semaphore+":") }) {
		t.Fatalf("with one permit fewer asked for, the checker did not find the semaphore's bound broken: %v", res)
	}
	t.Logf("with one permit fewer asked for, the checker refuses the history, as it should: %s", kinds(res.Problems))
}
