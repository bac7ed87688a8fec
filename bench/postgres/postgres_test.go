package postgres_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/bench/internal/paired"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// ttl is the lease TTL of every cycle; cycles release long before it. It
// is long so that OperationTimeout (TTL/10, at most 5s) survives the stalls
// of a shared, overloaded machine.
const ttl = time.Minute

// parallelGoroutines is the number of goroutines of the parallel runs.
const parallelGoroutines = 16

// baseline is the cycler every other one is compared with: the plain
// one-statement upsert lease.
const baseline = "plain-upsert"

// durable reports whether LEASE_BENCH_DURABLE=1 asks for a server that
// survives a crash of the machine (fsync, synchronous_commit and
// full_page_writes on), as users run it, instead of the harness's
// fsync=off.
func durable() bool { return os.Getenv("LEASE_BENCH_DURABLE") == "1" }

// A cycler runs acquire→release cycles. setup prepares the database once;
// newCycle returns one worker's cycle function, called with that worker's
// own key.
type cycler struct {
	name     string
	setup    func(b *testing.B, pool *pgxpool.Pool)
	newCycle func(b *testing.B, pool *pgxpool.Pool) func(ctx context.Context, key string) error
}

func store(b *testing.B, pool *pgxpool.Pool, o leasepostgres.Options) func(context.Context, string) error {
	s, err := leasepostgres.New(pool, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	c, err := lease.NewClient(s, lease.ClientOptions{Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: ttl})
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, key string) error {
		h, err := c.TryAcquire(ctx, key, p)
		if err != nil {
			return err
		}
		return h.Release(ctx)
	}
}

// backend is store without lease.Client: the store's own statements and
// client-side cost, to hold against plain-upsert. The nonce is drawn as
// the Client draws it.
func backend(b *testing.B, pool *pgxpool.Pool, o leasepostgres.Options) func(context.Context, string) error {
	s, err := leasepostgres.New(pool, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return func(ctx context.Context, key string) error {
		a := lease.Acquisition{Key: key, Owner: "bench", Nonce: rand.Text()}
		tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: ttl})
		if err != nil {
			return err
		}
		a.Token = tok
		return s.Release(ctx, a)
	}
}

func migrate(o leasepostgres.Options) func(b *testing.B, pool *pgxpool.Pool) {
	return func(b *testing.B, pool *pgxpool.Pool) {
		if err := leasepostgres.Migrate(context.Background(), pool, o); err != nil {
			b.Fatal(err)
		}
	}
}

var (
	logged   = leasepostgres.Options{Table: "leases_logged"}
	unlogged = leasepostgres.Options{Table: "leases_unlogged", Unlogged: true}
	nonotify = leasepostgres.Options{Table: "leases_nonotify", DisableNotify: true}
	bare     = leasepostgres.Options{Table: "leases_backend"}
	async    = leasepostgres.Options{Table: "leases_async", AsyncCommit: true}
)

const plainTable = `CREATE TABLE IF NOT EXISTS plain_leases (
    key        text        PRIMARY KEY,
    owner      text        NOT NULL,
    token      bigint      NOT NULL,
    expires_at timestamptz NOT NULL
)`

const naiveTable = `CREATE TABLE IF NOT EXISTS naive_leases (
    key        text        PRIMARY KEY,
    owner      text        NOT NULL,
    token      bigint      NOT NULL,
    expires_at timestamptz NOT NULL
)`

var cyclers = []cycler{
	{"floor", nil, func(b *testing.B, pool *pgxpool.Pool) func(context.Context, string) error {
		return func(ctx context.Context, _ string) error {
			var one int
			if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
				return err
			}
			return pool.QueryRow(ctx, "SELECT 1").Scan(&one)
		}
	}},
	{"leasepostgres", migrate(logged), func(b *testing.B, pool *pgxpool.Pool) func(context.Context, string) error {
		return store(b, pool, logged)
	}},
	{"leasepostgres-backend", migrate(bare), func(b *testing.B, pool *pgxpool.Pool) func(context.Context, string) error {
		return backend(b, pool, bare)
	}},
	{"leasepostgres-asynccommit", migrate(async), func(b *testing.B, pool *pgxpool.Pool) func(context.Context, string) error {
		return store(b, pool, async)
	}},
	{"leasepostgres-unlogged", migrate(unlogged), func(b *testing.B, pool *pgxpool.Pool) func(context.Context, string) error {
		return store(b, pool, unlogged)
	}},
	{"leasepostgres-nonotify", migrate(nonotify), func(b *testing.B, pool *pgxpool.Pool) func(context.Context, string) error {
		return store(b, pool, nonotify)
	}},
	{"plain-upsert", func(b *testing.B, pool *pgxpool.Pool) {
		if _, err := pool.Exec(context.Background(), plainTable); err != nil {
			b.Fatal(err)
		}
	}, func(b *testing.B, pool *pgxpool.Pool) func(context.Context, string) error {
		// The least a lease row can do in one statement per operation: an
		// upsert that takes only an expired row, then an update that
		// expires it. No holder report, no expired/superseded answer, no
		// nonce, no notification.
		return func(ctx context.Context, key string) error {
			var token int64
			err := pool.QueryRow(ctx, `INSERT INTO plain_leases AS l VALUES ($1, 'bench', 1, now() + interval '1 minute')
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = l.token + 1, expires_at = excluded.expires_at
WHERE l.expires_at <= now() RETURNING l.token`, key).Scan(&token)
			if err != nil {
				return err
			}
			_, err = pool.Exec(ctx, "UPDATE plain_leases SET expires_at = now() WHERE key = $1 AND token = $2", key, token)
			return err
		}
	}},
	{"advisory-lock", nil, func(b *testing.B, pool *pgxpool.Pool) func(context.Context, string) error {
		// A session lock lives on one connection: each worker pins one.
		c, err := pool.Acquire(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Release)
		return func(ctx context.Context, key string) error {
			var ok bool
			if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return errors.New("advisory lock held")
			}
			if err := c.QueryRow(ctx, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", key).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return errors.New("advisory lock was not held")
			}
			return nil
		}
	}},
	{"select-for-update", func(b *testing.B, pool *pgxpool.Pool) {
		if _, err := pool.Exec(context.Background(), naiveTable); err != nil {
			b.Fatal(err)
		}
	}, func(b *testing.B, pool *pgxpool.Pool) func(context.Context, string) error {
		// The textbook lease table: lock the row in a transaction, look at
		// it, write it, commit; release with one UPDATE.
		return func(ctx context.Context, key string) error {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "INSERT INTO naive_leases VALUES ($1, '', 0, '-infinity') ON CONFLICT DO NOTHING", key); err != nil {
					return err
				}
				var free bool
				var token int64
				if err := tx.QueryRow(ctx, "SELECT expires_at <= now(), token FROM naive_leases WHERE key = $1 FOR UPDATE", key).Scan(&free, &token); err != nil {
					return err
				}
				if !free {
					return errors.New("held")
				}
				_, err := tx.Exec(ctx, "UPDATE naive_leases SET owner = 'bench', token = $2, expires_at = now() + interval '1 minute' WHERE key = $1", key, token+1)
				return err
			})
			if err != nil {
				return err
			}
			_, err = pool.Exec(ctx, "UPDATE naive_leases SET expires_at = now() WHERE key = $1 AND owner = 'bench'", key)
			return err
		}
	}},
}

// newPool starts a dedicated PostgreSQL server (fsync off, synchronous_commit
// on, as the harness starts them; durable with LEASE_BENCH_DURABLE=1) and
// returns a pool on a fresh database, and the postmaster's process ID.
func newPool(b *testing.B) (*pgxpool.Pool, int) {
	var o testserver.PostgresOptions
	if durable() {
		o.Settings = []string{"fsync=on", "synchronous_commit=on", "full_page_writes=on"}
	}
	srv := testserver.StartPostgresWith(b, o)
	cfg, err := pgxpool.ParseConfig(srv.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = parallelGoroutines * 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	for _, c := range cyclers {
		if c.setup != nil {
			c.setup(b, pool)
		}
	}
	return pool, srv.PID()
}

var keys atomic.Int64

func newKey() string { return fmt.Sprint("bench-", keys.Add(1)) }

// BenchmarkCycle runs acquire→release cycles of every cycler, serially and
// with parallelGoroutines goroutines (each on a key of its own), against
// one dedicated PostgreSQL server.
func BenchmarkCycle(b *testing.B) {
	pool, pid := newPool(b)
	for _, c := range cyclers {
		b.Run("impl="+c.name+"/mode=serial", func(b *testing.B) {
			cycle := c.newCycle(b, pool)
			key := newKey()
			ctx := context.Background()
			if err := cycle(ctx, key); err != nil { // warm up: prepare the statements
				b.Fatal(err)
			}
			cpu := newCPUMeter(pid)
			for b.Loop() {
				if err := cycle(ctx, key); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b, b.N)
		})
		b.Run(fmt.Sprintf("impl=%s/mode=parallel%d", c.name, parallelGoroutines), func(b *testing.B) {
			// RunParallel starts parallelism × GOMAXPROCS goroutines; each
			// takes a worker prepared here.
			procs := runtime.GOMAXPROCS(0)
			b.SetParallelism(max(1, parallelGoroutines/procs))
			workers := make(chan func(context.Context, string) error, max(1, parallelGoroutines/procs)*procs)
			for range cap(workers) {
				workers <- c.newCycle(b, pool)
			}
			cpu := newCPUMeter(pid)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				cycle := <-workers
				key := newKey()
				ctx := context.Background()
				for pb.Next() {
					if err := cycle(ctx, key); err != nil {
						b.Error(err)
						return
					}
				}
			})
			cpu.report(b, b.N)
		})
	}
}

// product reports whether c is this module's PostgreSQL store, which the
// paired benchmarks compare with the baseline.
func product(c cycler) bool { return strings.HasPrefix(c.name, "leasepostgres") }

// eachProduct starts a server and runs pair as a sub-benchmark
// impl=<name> for each leasepostgres cycler, with the baseline cycler.
func eachProduct(b *testing.B, pair func(b *testing.B, pool *pgxpool.Pool, base, c cycler)) {
	pool, _ := newPool(b)
	i := slices.IndexFunc(cyclers, func(c cycler) bool { return c.name == baseline })
	if i < 0 {
		b.Fatalf("no cycler %q", baseline)
	}
	for _, c := range cyclers {
		if product(c) {
			b.Run("impl="+c.name, func(b *testing.B) { pair(b, pool, cyclers[i], c) })
		}
	}
}

// BenchmarkSerialPaired runs each leasepostgres cycle and the baseline's
// alternately on one goroutine and reports impl's time over the
// baseline's (x-plain, lower is better). Pairing them cycle by cycle
// cancels the drift of a shared machine's load, which swamps serial
// latencies measured one after the other. ns/op is per pair.
func BenchmarkSerialPaired(b *testing.B) {
	eachProduct(b, func(b *testing.B, pool *pgxpool.Pool, base, c cycler) {
		paired.Serial(b, "plain", paired.Op(base.newCycle(b, pool)), paired.Op(c.newCycle(b, pool)))
	})
}

// BenchmarkParallelPaired runs each leasepostgres cycle and the
// baseline's in alternating batches on parallelGoroutines goroutines each
// and reports impl's throughput over the baseline's (x-plain, higher is
// better). ns/op is per pair.
func BenchmarkParallelPaired(b *testing.B) {
	eachProduct(b, func(b *testing.B, pool *pgxpool.Pool, base, c cycler) {
		var baseOps, implOps []paired.Op
		for range parallelGoroutines {
			baseOps = append(baseOps, base.newCycle(b, pool))
			implOps = append(implOps, c.newCycle(b, pool))
		}
		paired.Parallel(b, "plain", 32*parallelGoroutines, baseOps, implOps)
	})
}
