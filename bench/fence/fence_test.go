package fence_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/testserver"
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

// writer is one worker's write; each worker has rows or keys of its own,
// so the runs measure the fence's cost, not contention.
type writer func() error

// impls builds, for each implementation, a function that returns a new
// worker's writer.
type impls map[string]func() writer

// pgImpls returns the plain and fenced transaction on a fresh database:
// one UPDATE of the worker's own row, in a transaction.
func pgImpls(b *testing.B) (impls, *counter) {
	url := testserver.Postgres(b).NewDatabase(b)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	c := &counter{}
	cfg.ConnConfig.Tracer = c
	cfg.MaxConns = parallelGoroutines
	cfg.MinConns = parallelGoroutines
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if err := fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE docs (id bigint PRIMARY KEY, body text NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	var ids atomic.Int64
	row := func() (int64, func(tx pgx.Tx) error) {
		id := ids.Add(1)
		if _, err := pool.Exec(ctx, `INSERT INTO docs VALUES ($1, '')`, id); err != nil {
			b.Fatal(err)
		}
		return id, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE docs SET body = $1 WHERE id = $2`, "written", id)
			return err
		}
	}
	return impls{
		"plain": func() writer {
			_, update := row()
			return func() error { return pgx.BeginFunc(ctx, pool, update) }
		},
		"fenced": func() writer {
			id, update := row()
			resources := []string{fmt.Sprintf("docs/%d", id)}
			return func() error { return fencepostgres.Tx(ctx, pool, snap, resources, update) }
		},
	}, c
}

// luaSet is the floor of any script that writes: a script that only runs
// SET. The difference between it and a plain SET is what running Lua at all
// costs; the difference between it and the fenced SET is what the fence's
// checks cost.
var luaSet = valkey.NewLuaScript(`return redis.call('SET', KEYS[1], ARGV[1])`, valkey.WithLoadSHA1(true))

// valkeyImpls returns a plain SET, a SET-only script and a fenced SET, and
// the client they use.
func valkeyImpls(b *testing.B) (impls, valkey.Client) {
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{testserver.Valkey(b).Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	fences, err := fencevalkey.New(client, fencevalkey.Options{Prefix: "bench-fence:"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var ids atomic.Int64
	key := func() (string, string) {
		resource := fmt.Sprintf("docs/%d", ids.Add(1))
		return resource, "doc:{" + resource + "}"
	}
	return impls{
		"plain": func() writer {
			_, k := key()
			return func() error { return client.Do(ctx, client.B().Set().Key(k).Value("written").Build()).Error() }
		},
		"lua": func() writer {
			_, k := key()
			return func() error { return luaSet.Exec(ctx, client, []string{k}, []string{"written"}).Error() }
		},
		"fenced": func() writer {
			r, k := key()
			set := fencevalkey.Set(k, "written", fencevalkey.SetOptions{})
			return func() error { _, err := fences.Do(ctx, snap, r, set); return err }
		},
	}, client
}

// BenchmarkTx times fencepostgres.Tx and the same transaction without the fence,
// serially and from parallelGoroutines goroutines. Serial runs report the
// statements (round trips) per transaction.
func BenchmarkTx(b *testing.B) {
	im, c := pgImpls(b)
	for _, mode := range []string{"serial", "parallel"} {
		for _, impl := range []string{"plain", "fenced"} {
			b.Run(fmt.Sprintf("mode=%s/impl=%s", mode, impl), func(b *testing.B) {
				m := statements(c)
				run(b, mode, im[impl], &m)
			})
		}
	}
}

// BenchmarkSet times a fenced SET, a plain SET and a SET-only script.
// Serial runs also report the server's own time per write.
func BenchmarkSet(b *testing.B) {
	im, client := valkeyImpls(b)
	for _, mode := range []string{"serial", "parallel"} {
		for _, impl := range []string{"plain", "lua", "fenced"} {
			b.Run(fmt.Sprintf("mode=%s/impl=%s", mode, impl), func(b *testing.B) {
				command := "evalsha"
				if impl == "plain" {
					command = "set"
				}
				m := serverTime(client, command)
				run(b, mode, im[impl], &m)
			})
		}
	}
}

// BenchmarkPaired runs the implementations of one write alternately, one
// after the other in every iteration (in turns of order), and reports each
// one's mean time and its ratio to the plain write. Load from other
// processes then hits all of them alike, which makes the ratio steadier
// than that of separate runs on a busy machine.
func BenchmarkPaired(b *testing.B) {
	b.Run("op=Tx", func(b *testing.B) {
		im, _ := pgImpls(b)
		paired(b, im, "plain", "fenced")
	})
	b.Run("op=Set", func(b *testing.B) {
		im, _ := valkeyImpls(b)
		paired(b, im, "plain", "lua", "fenced")
	})
}

func paired(b *testing.B, im impls, names ...string) {
	ws := make([]writer, len(names))
	for i, n := range names {
		ws[i] = im[n]()
		if err := ws[i](); err != nil { // warm up: connections, script load
			b.Fatal(err)
		}
	}
	spent := make([]time.Duration, len(names))
	n := 0
	for b.Loop() {
		for j := range ws {
			k := (j + n) % len(ws)
			start := time.Now()
			if err := ws[k](); err != nil {
				b.Fatal(err)
			}
			spent[k] += time.Since(start)
		}
		n++
	}
	for i, name := range names {
		b.ReportMetric(float64(spent[i].Nanoseconds())/float64(n), name+"-ns/op")
		if i > 0 {
			b.ReportMetric(float64(spent[i])/float64(spent[0]), name+"/"+names[0])
		}
	}
}

// meter measures something besides time over the serial runs: start is
// called when the timer starts, report when it stops.
type meter struct {
	start  func()
	report func(b *testing.B)
}

// statements reports the statements (round trips) per op counted by c.
func statements(c *counter) meter {
	var before int64
	return meter{
		start:  func() { before = c.n.Load() },
		report: func(b *testing.B) { b.ReportMetric(float64(c.n.Load()-before)/float64(b.N), "stmts/op") },
	}
}

// serverTime reports the server's own time per op for command, from INFO
// commandstats: what the write costs the single-threaded server, whatever
// the load on the client's side of the machine.
func serverTime(client valkey.Client, command string) meter {
	ctx := context.Background()
	return meter{
		start: func() {
			if err := client.Do(ctx, client.B().ConfigResetstat().Build()).Error(); err != nil {
				panic(err)
			}
		},
		report: func(b *testing.B) {
			info, err := client.Do(ctx, client.B().Info().Section("commandstats").Build()).ToString()
			if err != nil {
				b.Fatal(err)
			}
			for line := range strings.SplitSeq(info, "\n") {
				rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":")
				if !ok {
					continue
				}
				for field := range strings.SplitSeq(rest, ",") {
					if v, ok := strings.CutPrefix(field, "usec="); ok {
						usec, _ := strconv.ParseFloat(v, 64)
						b.ReportMetric(usec*1000/float64(b.N), "server-ns/op")
					}
				}
			}
		},
	}
}

// run times newWriter's writes, serially or from parallelGoroutines
// goroutines, with every worker created and warmed up before the timer
// starts. Serial runs also report what m measures, if m is not nil.
func run(b *testing.B, mode string, newWriter func() writer, m *meter) {
	workers := 1
	if mode == "parallel" {
		b.SetParallelism(max(1, parallelGoroutines/runtime.GOMAXPROCS(0)))
		workers = max(1, parallelGoroutines/runtime.GOMAXPROCS(0)) * runtime.GOMAXPROCS(0)
	}
	ws := make(chan writer, workers)
	for range workers {
		w := newWriter()
		if err := w(); err != nil {
			b.Fatal(err)
		}
		ws <- w
	}
	b.ReportAllocs()
	if mode == "serial" {
		w := <-ws
		if m != nil {
			m.start()
		}
		for b.Loop() {
			if err := w(); err != nil {
				b.Fatal(err)
			}
		}
		if m != nil {
			m.report(b)
		}
		return
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := <-ws
		for pb.Next() {
			if err := w(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
