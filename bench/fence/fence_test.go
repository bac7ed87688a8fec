package fence_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// snap is the acquisition every benchmark writes under.
var snap = lease.Snapshot{Key: "bench", Owner: "bench", Token: 1}

// parallelGoroutines is the number of goroutines of the parallel runs.
const parallelGoroutines = 16

// counter is a pgx tracer that counts the statements sent, BEGIN and
// COMMIT included: each is one round trip.
type counter struct{ n atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func newPool(b *testing.B) (*pgxpool.Pool, *counter) {
	url := testserver.Postgres(b).NewDatabase(b)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	c := &counter{}
	cfg.ConnConfig.Tracer = c
	cfg.MaxConns = parallelGoroutines
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	ctx := context.Background()
	if err := fence.Migrate(ctx, pool, fence.TableOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	return pool, c
}

// BenchmarkTx compares fence.Tx with the same transaction without a fence:
// one UPDATE of the caller's own row. Each worker writes its own row, so
// the runs measure the fence's cost, not contention. It reports the
// statements (round trips) per transaction.
func BenchmarkTx(b *testing.B) {
	for _, mode := range []string{"serial", "parallel"} {
		for _, impl := range []string{"plain", "fenced"} {
			b.Run(fmt.Sprintf("mode=%s/impl=%s", mode, impl), func(b *testing.B) {
				pool, c := newPool(b)
				ctx := context.Background()
				var ids atomic.Int64
				worker := func() func() error {
					id := ids.Add(1)
					if _, err := pool.Exec(ctx, `INSERT INTO docs VALUES ($1, '')`, id); err != nil {
						b.Fatal(err)
					}
					resources := []string{fmt.Sprintf("docs/%d", id)}
					update := func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `UPDATE docs SET body = $1 WHERE id = $2`, "written", id)
						return err
					}
					if impl == "plain" {
						return func() error { return pgx.BeginFunc(ctx, pool, update) }
					}
					return func() error { return fence.Tx(ctx, pool, snap, resources, update) }
				}
				run(b, mode, worker, &c.n)
			})
		}
	}
}

// luaSet is the floor of any script that writes: a script that only runs
// SET. The difference between it and a plain SET is what running Lua at all
// costs; the difference between it and the fenced SET is what the fence's
// checks cost.
var luaSet = valkey.NewLuaScript(`return redis.call('SET', KEYS[1], ARGV[1])`, valkey.WithLoadSHA1(true))

// BenchmarkSet compares a fenced SET (one script) with a plain SET and with
// a script that only runs SET.
func BenchmarkSet(b *testing.B) {
	for _, mode := range []string{"serial", "parallel"} {
		for _, impl := range []string{"plain", "lua", "fenced"} {
			b.Run(fmt.Sprintf("mode=%s/impl=%s", mode, impl), func(b *testing.B) {
				client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{testserver.Valkey(b).Addr()}, DisableCache: true})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(client.Close)
				fences, err := fence.NewValkey(client, fence.ValkeyOptions{Prefix: "bench-fence:"})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				var ids atomic.Int64
				worker := func() func() error {
					resource := fmt.Sprintf("docs/%d", ids.Add(1))
					key := "doc:{" + resource + "}"
					switch impl {
					case "plain":
						return func() error { return client.Do(ctx, client.B().Set().Key(key).Value("written").Build()).Error() }
					case "lua":
						return func() error { return luaSet.Exec(ctx, client, []string{key}, []string{"written"}).Error() }
					}
					set := fence.Set(key, "written", fence.SetOptions{})
					return func() error { _, err := fences.Do(ctx, snap, resource, set); return err }
				}
				// The first script call loads the script; keep it out of the timing.
				if err := worker()(); err != nil {
					b.Fatal(err)
				}
				run(b, mode, worker, nil)
			})
		}
	}
}

// run times newWorker's writes, serially or from parallelGoroutines
// goroutines, and reports statements per op if stmts is not nil.
func run(b *testing.B, mode string, newWorker func() func() error, stmts *atomic.Int64) {
	var before int64
	b.ReportAllocs()
	if mode == "serial" {
		write := newWorker()
		if stmts != nil {
			before = stmts.Load()
		}
		b.ResetTimer()
		for b.Loop() {
			if err := write(); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.SetParallelism(max(1, parallelGoroutines/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			write := newWorker()
			for pb.Next() {
				if err := write(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	if stmts != nil && mode == "serial" {
		b.ReportMetric(float64(stmts.Load()-before)/float64(b.N), "stmts/op")
	}
}
