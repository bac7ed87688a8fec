package leasequeue_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// workers is the number of workers of every run; each processes one item
// at a time.
const workers = 5

// phases is a pgx tracer that adds up, by phase, the statements sent and
// the time they took (round trip included).
type phases struct {
	mu sync.Mutex
	n  map[string]int64
	d  map[string]time.Duration
}

type started struct {
	at    time.Time
	phase string
}

type startKey struct{}

func (p *phases) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, startKey{}, started{time.Now(), phaseOf(data.SQL)})
}

func (p *phases) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	s, ok := ctx.Value(startKey{}).(started)
	if !ok {
		return
	}
	d := time.Since(s.at)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n[s.phase]++
	p.d[s.phase] += d
}

func (p *phases) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n, p.d = map[string]int64{}, map[string]time.Duration{}
}

// phaseOf names the phase of a statement by what only it contains.
func phaseOf(sql string) string {
	switch {
	case strings.Contains(sql, "SKIP LOCKED"):
		return "next"
	case strings.Contains(sql, "pg_notify"):
		return "release"
	case strings.Contains(sql, `"leases"`) && strings.Contains(sql, "INSERT"):
		return "acquire"
	case strings.Contains(sql, `"leases"`):
		return "renew"
	case strings.Contains(sql, "attempts + 1"):
		return "begin"
	case strings.Contains(sql, "'done'"):
		return "complete"
	}
	return "other"
}

// report adds the phases' metrics to b: statements per item, and for each
// phase the statement time per item, summed over the workers.
func (p *phases) report(b *testing.B, items int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for ph, c := range p.n {
		n += c
		b.ReportMetric(float64(p.d[ph].Microseconds())/float64(items), ph+"-µs/item")
	}
	b.ReportMetric(float64(n)/float64(items), "stmts/item")
}

// env is one database with the lease and queue tables, and a pool per
// worker, as if each worker were a process of its own.
type env struct {
	pools  []*pgxpool.Pool
	phases *phases
}

func newEnv(b *testing.B) *env {
	url := testserver.Postgres(b).NewDatabase(b)
	e := &env{phases: &phases{}}
	e.phases.reset()
	ctx := context.Background()
	for range workers {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			b.Fatal(err)
		}
		cfg.ConnConfig.Tracer = e.phases
		cfg.MaxConns, cfg.MinConns = 4, 2
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(p.Close)
		e.pools = append(e.pools, p)
	}
	if err := leasepostgres.Migrate(ctx, e.pools[0], leasepostgres.Options{}); err != nil {
		b.Fatal(err)
	}
	if err := leasequeue.MigratePostgres(ctx, e.pools[0], leasequeue.PostgresOptions{}); err != nil {
		b.Fatal(err)
	}
	return e
}

// impl processes every item of queue with the workers until none is left.
type impl func(b *testing.B, e *env, queue string, items int)

// leased is package leasequeue: one Queue per worker, each item claimed
// under its own lease, begun and completed with fenced writes, and its
// lease released.
func leased(b *testing.B, e *env, queue string, items int) {
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Int64
	obs := leasequeue.ObserverFunc(func(ev leasequeue.Event) {
		if c, ok := ev.(*leasequeue.Completed); ok && c.Err == nil && done.Add(1) == int64(items) {
			cancel()
		}
	})
	var wg sync.WaitGroup
	for w, pool := range e.pools {
		store, err := leasepostgres.New(pool, leasepostgres.Options{DisableNotify: true})
		if err != nil {
			b.Fatal(err)
		}
		client, err := lease.NewClient(store, lease.ClientOptions{Owner: fmt.Sprint("worker-", w)})
		if err != nil {
			b.Fatal(err)
		}
		src, err := leasequeue.NewPostgresSource(pool, queue, leasequeue.PostgresOptions{})
		if err != nil {
			b.Fatal(err)
		}
		q, err := leasequeue.New(client, src, leasequeue.Options{Name: queue, Policy: policy, PollEvery: time.Millisecond, Observer: obs})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			_ = q.Run(ctx, func(context.Context, *leasequeue.Claim) error { return nil })
		})
	}
	wg.Wait()
	if n := done.Load(); n != int64(items) {
		b.Fatalf("%d of %d items completed", n, items)
	}
}

// The plain loop's statements: claim one due item with SKIP LOCKED and
// mark it running (hidden for the same 30s), then mark it done.
const (
	plainClaim = `UPDATE public.leasequeue_jobs AS j
SET state = 'running', attempts = j.attempts + 1, visible_at = now() + interval '30 seconds', updated_at = now()
FROM (
    SELECT queue, id FROM public.leasequeue_jobs
    WHERE queue = $1 AND state = 'pending' AND visible_at <= now()
    ORDER BY visible_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
) AS due
WHERE j.queue = due.queue AND j.id = due.id
RETURNING j.id`
	plainComplete = `UPDATE public.leasequeue_jobs SET state = 'done', updated_at = now()
WHERE queue = $1 AND id = $2 AND state = 'running'`
)

// plain is the same loop without leases: five goroutines, each claiming
// one item at a time with SKIP LOCKED and marking it done.
func plain(b *testing.B, e *env, queue string, items int) {
	ctx := context.Background()
	var done atomic.Int64
	var wg sync.WaitGroup
	for _, pool := range e.pools {
		wg.Go(func() {
			for done.Load() < int64(items) {
				var id string
				err := pool.QueryRow(ctx, plainClaim, queue).Scan(&id)
				if err == pgx.ErrNoRows {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					b.Error(err)
					return
				}
				tag, err := pool.Exec(ctx, plainComplete, queue, id)
				if err != nil || tag.RowsAffected() != 1 {
					b.Errorf("complete %s: %v, %v", id, tag, err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
}

var impls = []struct {
	name string
	run  impl
}{
	{"leases", leased},
	{"plain", plain},
}

var runs atomic.Int64

// BenchmarkQueue processes b.N items with five workers; ns/op is the wall
// time per item, items/s the throughput, and the phase metrics say where
// the statements' time goes.
func BenchmarkQueue(b *testing.B) {
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			e := newEnv(b)
			queue := fmt.Sprintf("bench-%d", runs.Add(1))
			src, err := leasequeue.NewPostgresSource(e.pools[0], queue, leasequeue.PostgresOptions{})
			if err != nil {
				b.Fatal(err)
			}
			ids := make([]string, b.N)
			for i := range ids {
				ids[i] = fmt.Sprintf("item-%07d", i)
			}
			ctx := context.Background()
			for i := 0; i < len(ids); i += 10000 {
				if _, err := src.Enqueue(ctx, ids[i:min(i+10000, len(ids))]...); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := e.pools[0].Exec(ctx, "VACUUM ANALYZE leasequeue_jobs"); err != nil {
				b.Fatal(err)
			}
			e.phases.reset()
			b.ResetTimer()
			start := time.Now()
			im.run(b, e, queue, b.N)
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "items/s")
			e.phases.report(b, b.N)
		})
	}
}

// pairedBatch is the number of items each loop processes in one iteration
// of BenchmarkPaired.
const pairedBatch = 400

// BenchmarkPaired runs both loops in every iteration, one batch of
// pairedBatch items each, one after the other, so that load from other
// processes hits both alike; x-plain is the plain loop's throughput over
// the leased loop's.
func BenchmarkPaired(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	var took [2]time.Duration
	for i := range b.N {
		for k, im := range impls {
			queue := fmt.Sprintf("paired-%d-%s-%d", runs.Add(1), im.name, i)
			src, err := leasequeue.NewPostgresSource(e.pools[0], queue, leasequeue.PostgresOptions{})
			if err != nil {
				b.Fatal(err)
			}
			ids := make([]string, pairedBatch)
			for j := range ids {
				ids[j] = fmt.Sprintf("item-%04d", j)
			}
			if _, err := src.Enqueue(ctx, ids...); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			im.run(b, e, queue, pairedBatch)
			took[k] += time.Since(start)
		}
	}
	items := float64(b.N * pairedBatch)
	b.ReportMetric(items/took[0].Seconds(), "leases-items/s")
	b.ReportMetric(items/took[1].Seconds(), "plain-items/s")
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "x-plain")
}
