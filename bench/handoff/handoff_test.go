package handoff_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	leasememory "github.com/golib/lease/backends/memory"
	leasepostgres "github.com/golib/lease/backends/postgres"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

const (
	// replicas is the number of replicas of the service restarted.
	replicas = 3
	// ttl is the TTL of the hand-off and release methods: long, so that
	// nothing but the notification can explain a short gap.
	ttl = 10 * time.Second
	// expiryTTL is the TTL of the expiry method, whose gap is about it.
	expiryTTL = time.Second
	// settle is how long a restart waits, once the fresh replica's
	// release watch is in place, before it stops the leader: the watch's
	// first wake-up (the backend announces every new watch) and the
	// attempt it causes are then over, as for a replica that has been
	// waiting for a while.
	settle = 20 * time.Millisecond
)

// A backend opens a lease backend per replica, as separate processes
// would have: each replica's store has connections of its own.
type backend struct {
	name string
	// start returns the function that opens a store for one replica
	// and the function that closes it.
	start func(tb testing.TB) func(tb testing.TB) (lease.Backend, func())
}

var backends = []backend{
	{"valkey", startValkey},
	{"postgres", startPostgres},
	{"memory", startMemory},
}

// startValkey opens stores on the test harness's standalone Valkey server
// (or LEASE_VALKEY_ADDR), each on a valkey-go client of its own.
func startValkey(tb testing.TB) func(testing.TB) (lease.Backend, func()) {
	addr := testserver.Valkey(tb).Addr()
	return func(tb testing.TB) (lease.Backend, func()) {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			tb.Fatal(err)
		}
		s, err := leasevalkey.New(c, leasevalkey.Options{Prefix: "bench:"})
		if err != nil {
			c.Close()
			tb.Fatal(err)
		}
		return s, c.Close
	}
}

// startPostgres opens stores on a fresh database of the test harness's
// PostgreSQL server (fsync off; or LEASE_POSTGRES_URL), migrated, each on
// a pool of its own.
func startPostgres(tb testing.TB) func(testing.TB) (lease.Backend, func()) {
	url := testserver.Postgres(tb).NewDatabase(tb)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	defer pool.Close()
	if err := leasepostgres.Migrate(context.Background(), pool, leasepostgres.Options{}); err != nil {
		tb.Fatal(err)
	}
	return func(tb testing.TB) (lease.Backend, func()) {
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			tb.Fatal(err)
		}
		s, err := leasepostgres.New(pool, leasepostgres.Options{})
		if err != nil {
			pool.Close()
			tb.Fatal(err)
		}
		return s, func() { s.Close(); pool.Close() }
	}
}

// startMemory shares one memory store between the replicas: the floor,
// what the client and the store's bookkeeping cost without I/O.
func startMemory(testing.TB) func(testing.TB) (lease.Backend, func()) {
	s := leasememory.New(leasememory.Options{})
	return func(testing.TB) (lease.Backend, func()) { return s, func() {} }
}

// A method is how the leader of a restart steps down.
type method struct {
	name string
	ttl  time.Duration
	// lead is how long a leader leads, once the waiting replicas watch,
	// before it is stopped.
	lead func() time.Duration
	// stop ends leader's leadership, after its renewer was stopped, and
	// returns when its lease ended on the backend, by the client's
	// clock; waiting are the owners of the waiting replicas.
	stop func(ctx context.Context, leader *replica, waiting []string) (time.Time, error)
}

var methods = []method{
	{"handoff", ttl, settled, func(ctx context.Context, leader *replica, waiting []string) (time.Time, error) {
		at := time.Now()
		return at, leader.h.HandOff(ctx, lease.Offer{Candidates: waiting})
	}},
	{"release", ttl, settled, func(ctx context.Context, leader *replica, _ []string) (time.Time, error) {
		at := time.Now()
		return at, leader.h.Release(ctx)
	}},
	// A waiter that finds the key held sleeps until the holder's time
	// runs out, or, once it saw the holder renew, at least Poll (the TTL);
	// so the expiry's gap depends on when the leader stops in the waiters'
	// cycle: a random moment between one and three TTLs after they began
	// waiting.
	{"expiry", expiryTTL, func() time.Duration { return expiryTTL + rand.N(2*expiryTTL) }, func(_ context.Context, leader *replica, _ []string) (time.Time, error) {
		// No release: the lease ends on the backend one TTL after the
		// last renewal the backend received, whose send time is the
		// handle's deadline less its local lifetime.
		p := leader.h.Policy()
		return leader.h.Deadline().Add(-p.LocalLifetime()).Add(p.TTL()), nil
	}},
}

// settled returns settle: a gap woken by a notification does not depend
// on how long the waiters waited.
func settled() time.Duration { return settle }

// A replica is one process of the service: a client of its own, waiting
// in Acquire until it leads.
type replica struct {
	owner  string
	close  func()
	ready  chan struct{} // closed once its Acquire watches for releases
	h      *lease.Handle // once elected
	m      *lease.Managed
	leadAt time.Time // when its Acquire returned
	err    error
}

// An election is a replica's Acquire returning, with the lease or not.
type election struct{ r *replica }

// watching is a backend that closes ready the first time a release watch
// is in place, and forwards everything else. It has the optional
// capabilities the benchmark uses, HandOffer and ReleaseWatcher, and
// passes Preferred through.
type watching struct {
	lease.Backend
	once  sync.Once
	ready chan struct{}
}

func (w *watching) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	rw, ok := w.Backend.(lease.ReleaseWatcher)
	if !ok {
		return nil, nil, errors.ErrUnsupported
	}
	ch, stop, err := rw.WatchReleases(ctx, key)
	if err == nil {
		w.once.Do(func() { close(w.ready) })
	}
	return ch, stop, err
}

func (w *watching) HandOff(ctx context.Context, a lease.Acquisition, o lease.Offer) (lease.Token, error) {
	ho, ok := w.Backend.(lease.HandOffer)
	if !ok {
		return 0, fmt.Errorf("%T: %w", w.Backend, errors.ErrUnsupported)
	}
	return ho.HandOff(ctx, a, o)
}

// restarts runs the rolling restarts of one benchmark.
type restarts struct {
	tb      testing.TB
	ctx     context.Context
	open    func(testing.TB) (lease.Backend, func())
	key     string
	policy  lease.Policy
	n       int // replicas started
	elected chan election
}

// start starts a fresh replica that waits in Acquire.
func (rs *restarts) start() *replica {
	rs.n++
	b, closeStore := rs.open(rs.tb)
	w := &watching{Backend: b, ready: make(chan struct{})}
	r := &replica{owner: fmt.Sprintf("replica-%d", rs.n), close: closeStore, ready: w.ready}
	// No background sweep: it would take a lease of its own now and then.
	c, err := lease.NewClient(w, lease.ClientOptions{Owner: r.owner, SweepEvery: -1})
	if err != nil {
		rs.tb.Fatal(err)
	}
	go func() {
		h, err := c.Acquire(rs.ctx, rs.key, rs.policy)
		r.leadAt = time.Now()
		if err == nil {
			r.h = h
			r.m, err = h.StartManaged(rs.ctx)
		}
		r.err = err
		rs.elected <- election{r}
	}()
	return r
}

// lead waits for one of the waiting replicas to be elected and returns it.
func (rs *restarts) lead() *replica {
	select {
	case e := <-rs.elected:
		if e.r.err != nil {
			rs.tb.Fatalf("%s: %v", e.r.owner, e.r.err)
		}
		return e.r
	case <-time.After(time.Minute):
		rs.tb.Fatal("no replica was elected within a minute")
		return nil
	}
}

// BenchmarkRollingRestart measures the leadership gap while 3 replicas of
// a service are restarted one after the other, each restart stopping the
// leader and starting a fresh replica (a new client with a new owner, on
// connections of its own) that waits in Acquire: the time from the end of
// the old leader's lease on the backend (the send time of its HandOff or
// Release; for expiry its last renewal's send time plus the TTL) to the
// new leader's Acquire returning. One op is a rolling restart of the 3
// replicas (3 restarts); gap-median-ms and gap-max-ms are the median and
// the largest gap of the run's restarts. The hand-off offers the lease to
// both waiting replicas, the first to ask takes it. The leader is stopped
// 20ms after the waiting replicas' release watches are in place (hand-off
// and release), or at a random moment 1 to 3 TTLs after (expiry, whose gap
// depends on the waiters' sleep cycle).
func BenchmarkRollingRestart(b *testing.B) {
	for _, be := range backends {
		b.Run("backend="+be.name, func(b *testing.B) {
			open := be.start(b)
			for _, m := range methods {
				b.Run("method="+m.name, func(b *testing.B) {
					gaps := rollingRestarts(b, open, m)
					slices.Sort(gaps)
					b.ReportMetric(0, "ns/op")
					b.ReportMetric(float64(gaps[len(gaps)/2])/1e6, "gap-median-ms")
					b.ReportMetric(float64(gaps[len(gaps)-1])/1e6, "gap-max-ms")
				})
			}
		})
	}
}

// rollingRestarts runs b.N rolling restarts of the replicas with method m
// and returns the gap of each restart.
func rollingRestarts(b *testing.B, open func(testing.TB) (lease.Backend, func()), m method) []time.Duration {
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: m.ttl})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rs := &restarts{tb: b, ctx: ctx, open: open, key: b.Name(), policy: p, elected: make(chan election, replicas)}
	var all []*replica
	defer func() {
		cancel()
		for _, r := range all {
			if r.m != nil {
				r.m.Stop(context.Background())
			}
			if r.h != nil {
				_ = r.h.Release(context.Background())
			}
		}
		// The waiting replicas' Acquire return once ctx ended.
		for range replicas - 1 {
			<-rs.elected
		}
		for _, r := range all {
			r.close()
		}
	}()
	first := rs.start()
	all = append(all, first)
	leader := rs.lead()
	var waiting []*replica
	for range replicas - 1 {
		r := rs.start()
		all, waiting = append(all, r), append(waiting, r)
	}
	var gaps []time.Duration
	b.ResetTimer()
	for range b.N * replicas {
		owners := make([]string, len(waiting))
		for i, r := range waiting {
			<-r.ready
			owners[i] = r.owner
		}
		time.Sleep(m.lead())
		if err := leader.m.Stop(ctx); err != nil {
			b.Fatalf("%s: stop: %v", leader.owner, err)
		}
		ended, err := m.stop(ctx, leader, owners)
		if err != nil {
			b.Fatalf("%s: %s: %v", leader.owner, m.name, err)
		}
		next := rs.lead()
		gaps = append(gaps, next.leadAt.Sub(ended))
		// The old replica is gone: its connections close (which ends no
		// lease), and the cleanup has nothing to release.
		leader.close()
		all = slices.DeleteFunc(all, func(r *replica) bool { return r == leader })
		waiting = slices.DeleteFunc(waiting, func(r *replica) bool { return r == next })
		leader = next
		r := rs.start()
		all, waiting = append(all, r), append(waiting, r)
	}
	b.StopTimer()
	return gaps
}
