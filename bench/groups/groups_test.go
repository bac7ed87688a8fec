package groups_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	valkey "github.com/valkey-io/valkey-go"

	leasememory "github.com/golib/lease/backends/memory"
	leasepostgres "github.com/golib/lease/backends/postgres"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/bench/internal/paired"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

const (
	// ttl is the TTL of every acquisition; each is released long before
	// it. OperationTimeout is generous, so that the stalls of a shared,
	// overloaded machine do not fail a cycle and end the benchmark.
	ttl              = time.Minute
	operationTimeout = 5 * time.Second

	// permits is the number of permits of the benchmarks' semaphores.
	permits = 8
)

// setKeys returns the 3 keys of the set named key: "{key}/1", "{key}/2"
// and "{key}/3", sorted, and in one hash slot (the tag key), as a Valkey
// cluster needs them.
func setKeys(key string) []string {
	tag := "{" + key + "}/"
	return []string{tag + "1", tag + "2", tag + "3"}
}

// memo returns f's result for the last key it was called with, so that a
// cycle does not build its keys again each time: the benchmarks call each
// cycle with one key.
func memo(f func(string) []string) func(string) []string {
	var last string
	var keys []string
	return func(key string) []string {
		if keys == nil || key != last {
			last, keys = key, f(key)
		}
		return keys
	}
}

// An env is one backend under test: a lease.Client on a fresh store, and
// the address of the Valkey server the store is on, for the peers, and a
// client of it.
type env struct {
	client     *lease.Client
	policy     lease.Policy
	valkeyAddr string
	valkey     valkey.Client
}

// A backend starts an env.
type backend struct {
	name  string
	start func(tb testing.TB) env
}

// backends are the backends of the benchmarks. The memory store is the
// floor: what the client and the store's bookkeeping cost without I/O.
var backends = []backend{
	{"valkey", startValkey},
	{"postgres", startPostgres},
	{"memory", startMemory},
}

func newEnv(tb testing.TB, b lease.Backend) env {
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "bench"})
	if err != nil {
		tb.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: ttl, OperationTimeout: operationTimeout})
	if err != nil {
		tb.Fatal(err)
	}
	return env{client: c, policy: p}
}

// startValkey returns an env on the test harness's standalone Valkey
// server (or LEASE_VALKEY_ADDR).
func startValkey(tb testing.TB) env {
	addr := testserver.Valkey(tb).Addr()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	s, err := leasevalkey.New(c, leasevalkey.Options{Prefix: "bench:"})
	if err != nil {
		tb.Fatal(err)
	}
	e := newEnv(tb, s)
	e.valkeyAddr, e.valkey = addr, c
	return e
}

// startPostgres returns an env on a fresh database of the test harness's
// PostgreSQL server (fsync off; or LEASE_POSTGRES_URL), migrated.
func startPostgres(tb testing.TB) env {
	pool, err := pgxpool.New(context.Background(), testserver.Postgres(tb).NewDatabase(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	if err := leasepostgres.Migrate(context.Background(), pool, leasepostgres.Options{}); err != nil {
		tb.Fatal(err)
	}
	s, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return newEnv(tb, s)
}

func startMemory(tb testing.TB) env { return newEnv(tb, leasememory.New(leasememory.Options{})) }

// An acquirer takes what one acquisition on key holds and returns the
// function that releases it.
type acquirer func(ctx context.Context, key string) (release func(context.Context) error, err error)

// An impl is one way of taking and releasing a lease, a permit or a set.
type impl struct {
	name string
	// peer is set for a peer library's lock (on Valkey only), which is
	// not a lease of the store.
	peer bool
	// separate is set when the keys an acquisition holds are separate
	// leases, each with a token of its own (not one set).
	separate bool
	// holds returns the keys an acquisition on key holds: lease keys,
	// or for a peer the keys of its Valkey server.
	holds func(key string) []string
	new   func(tb testing.TB, e env) acquirer
}

// impls are the acquisitions compared, each on keys of its own.
var impls = []impl{
	{
		name:  "lease",
		holds: func(key string) []string { return []string{key} },
		new: func(_ testing.TB, e env) acquirer {
			return func(ctx context.Context, key string) (func(context.Context) error, error) {
				h, err := e.client.TryAcquire(ctx, key, e.policy)
				if err != nil {
					return nil, err
				}
				return h.Release, nil
			}
		},
	},
	{
		name:  "permit",
		holds: func(key string) []string { return []string{lease.PermitKey(key, 0)} }, // the lowest free slot
		new: func(_ testing.TB, e env) acquirer {
			return func(ctx context.Context, key string) (func(context.Context) error, error) {
				h, err := e.client.TryAcquirePermit(ctx, key, permits, e.policy)
				if err != nil {
					return nil, err
				}
				return h.Release, nil
			}
		},
	},
	{
		// Three single leases taken in order, the way to take several
		// keys without a set (in one order everywhere, so that two
		// callers cannot deadlock), released in the opposite order.
		name:     "leases3",
		separate: true,
		holds:    setKeys,
		new: func(_ testing.TB, e env) acquirer {
			keys := memo(setKeys)
			return func(ctx context.Context, key string) (func(context.Context) error, error) {
				var held []*lease.Handle
				release := func(ctx context.Context) error {
					var errs []error
					for i := len(held) - 1; i >= 0; i-- {
						errs = append(errs, held[i].Release(ctx))
					}
					return errors.Join(errs...)
				}
				for _, k := range keys(key) {
					h, err := e.client.TryAcquire(ctx, k, e.policy)
					if err != nil {
						return nil, errors.Join(err, release(ctx))
					}
					held = append(held, h)
				}
				return release, nil
			}
		},
	},
	{
		name:  "set",
		holds: setKeys,
		new: func(_ testing.TB, e env) acquirer {
			keys := memo(setKeys)
			return func(ctx context.Context, key string) (func(context.Context) error, error) {
				h, err := e.client.TryAcquireSet(ctx, keys(key), e.policy)
				if err != nil {
					return nil, err
				}
				return h.Release, nil
			}
		},
	},
	{
		// bsm/redislock's ObtainMulti: one script that takes every key
		// with MSETNX and a random value, then a release script that
		// deletes them if all still hold it. No token, no fence, no
		// holder report, no release notification. Default options: no
		// retry.
		name:  "obtainmulti",
		peer:  true,
		holds: setKeys,
		new: func(tb testing.TB, e env) acquirer {
			rc := redis.NewClient(&redis.Options{Addr: e.valkeyAddr})
			tb.Cleanup(func() { rc.Close() })
			locks := redislock.New(rc)
			keys := memo(setKeys)
			return func(ctx context.Context, key string) (func(context.Context) error, error) {
				l, err := locks.ObtainMulti(ctx, keys(key), ttl, nil)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}
		},
	},
}

// runs reports whether i runs on e's backend: peers only on Valkey.
func (i impl) runs(e env) bool { return !i.peer || e.valkeyAddr != "" }

// cycle returns i's acquire→release cycle on e.
func (i impl) cycle(tb testing.TB, e env) paired.Op {
	acquire := i.new(tb, e)
	return func(ctx context.Context, key string) error {
		release, err := acquire(ctx, key)
		if err != nil {
			return err
		}
		return release(ctx)
	}
}

func implNamed(tb testing.TB, name string) impl {
	for _, i := range impls {
		if i.name == name {
			return i
		}
	}
	tb.Fatalf("no impl %q", name)
	return impl{}
}

// valkeyCPU returns the CPU time the Valkey server of e has used, in
// seconds (used_cpu_sys + used_cpu_user).
func valkeyCPU(tb testing.TB, e env) float64 {
	c := e.valkey
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for line := range strings.SplitSeq(info, "\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					tb.Fatalf("INFO cpu: %q: %v", line, err)
				}
				total += n
			}
		}
	}
	return total
}

// BenchmarkCycle measures one acquire→release cycle of each impl on each
// backend, one goroutine at a time, on a free key or set; on Valkey also
// the server's CPU time per cycle (server-us/cycle): what the scripts
// cost, apart from the round trips and the client. The names are
// key=value so that benchstat can put the impls side by side (benchstat
// -col /backend -row /impl) and benchsum can compare each with lease.
func BenchmarkCycle(b *testing.B) {
	for _, be := range backends {
		b.Run("backend="+be.name, func(b *testing.B) {
			e := be.start(b)
			for _, i := range impls {
				if !i.runs(e) {
					continue
				}
				b.Run("impl="+i.name+"/mode=serial", func(b *testing.B) {
					cycle := i.cycle(b, e)
					ctx := context.Background()
					key := b.Name()
					if err := cycle(ctx, key); err != nil { // warm up: connect, load scripts, prepare statements
						b.Fatal(err)
					}
					var cpu float64
					if e.valkey != nil {
						cpu = valkeyCPU(b, e)
					}
					for b.Loop() {
						if err := cycle(ctx, key); err != nil {
							b.Fatal(err)
						}
					}
					if e.valkey != nil {
						b.ReportMetric((valkeyCPU(b, e)-cpu)*1e6/float64(b.N), "server-us/cycle")
					}
				})
			}
		})
	}
}

// pairs are the comparisons of BenchmarkSerialPaired: impl against base.
var pairs = []struct{ base, impl string }{
	{"lease", "permit"},
	{"leases3", "set"},
	{"obtainmulti", "set"},
}

// BenchmarkSerialPaired runs each pair's cycles alternately on one
// goroutine, on each backend, and reports impl's time over base's
// (x-<base>, lower is better): a permit over a lease (x-lease), a 3-key
// set over 3 single leases (x-leases3), a set over redislock's
// ObtainMulti (x-obtainmulti, Valkey only). Pairing them cycle by cycle
// cancels the drift of a shared machine's load, which swamps serial
// latencies measured one after the other. ns/op is per pair.
func BenchmarkSerialPaired(b *testing.B) {
	for _, be := range backends {
		b.Run("backend="+be.name, func(b *testing.B) {
			e := be.start(b)
			for _, p := range pairs {
				base, i := implNamed(b, p.base), implNamed(b, p.impl)
				if !base.runs(e) || !i.runs(e) {
					continue
				}
				b.Run("vs="+p.base+"/impl="+p.impl, func(b *testing.B) {
					paired.Serial(b, p.base, base.cycle(b, e), i.cycle(b, e))
				})
			}
		})
	}
}
