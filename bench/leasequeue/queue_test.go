package leasequeue_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// workerCounts are the worker counts of every impl; each worker processes
// one item at a time.
var workerCounts = []int{1, 8}

// pollEvery is how long every impl waits before it looks again when it
// found no item (leasequeue's PollEvery, River's fetch cooldown and poll
// interval, the plain loop's sleep). The items are all there before the
// clock starts, so it matters only at the end of a run.
const pollEvery = time.Millisecond

// hide is the visibility timeout of a claimed item: the lease TTL of
// leasequeue, the plain loop's hide. Items finish long before it.
const hide = 30 * time.Second

// An impl is one queue under test. setup prepares a fresh database once;
// enqueue adds the items to queue before the clock starts; run processes
// every item of queue with workers workers and returns when all are done.
type impl struct {
	name    string
	setup   func(b *testing.B, pool *pgxpool.Pool)
	enqueue func(b *testing.B, pool *pgxpool.Pool, queue string, items int)
	run     func(b *testing.B, pool *pgxpool.Pool, queue string, items, workers int)
}

var impls = []impl{
	{"plain", plainSetup, plainEnqueue, plainRun},
	{"leasequeue", leasedSetup, leasedEnqueue, leasedRun},
	{"river", riverSetup, riverEnqueue, riverRun},
}

// The plain loop's table and statements. The claim hides the item for hide
// (visible_at), so an item whose worker died is claimed again after it;
// the done statement needs no condition but the id, as a plain loop has no
// fence.
const (
	plainTable = `CREATE TABLE plain_jobs (
    id         bigserial   PRIMARY KEY,
    queue      text        NOT NULL,
    state      text        NOT NULL DEFAULT 'pending',
    attempts   integer     NOT NULL DEFAULT 0,
    visible_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX plain_jobs_due ON plain_jobs (queue, visible_at) WHERE state IN ('pending', 'running')`
	plainEnqueueSQL = `INSERT INTO plain_jobs (queue) SELECT $1 FROM generate_series(1, $2)`
	plainClaim      = `UPDATE plain_jobs SET state = 'running', attempts = attempts + 1, visible_at = now() + $2::interval
WHERE id = (
    SELECT id FROM plain_jobs
    WHERE queue = $1 AND state IN ('pending', 'running') AND visible_at <= now()
    ORDER BY visible_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING id`
	plainDone = `UPDATE plain_jobs SET state = 'done' WHERE id = $1`
)

func plainSetup(b *testing.B, pool *pgxpool.Pool) { exec(b, pool, plainTable) }

func plainEnqueue(b *testing.B, pool *pgxpool.Pool, queue string, items int) {
	exec(b, pool, plainEnqueueSQL, queue, items)
}

// plainRun runs workers goroutines, each claiming one item at a time and
// marking it done: two statements per item.
func plainRun(b *testing.B, pool *pgxpool.Pool, queue string, items, workers int) {
	ctx := context.Background()
	var done atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for done.Load() < int64(items) {
				var id int64
				err := pool.QueryRow(ctx, plainClaim, queue, hide).Scan(&id)
				if err == pgx.ErrNoRows {
					time.Sleep(pollEvery)
					continue
				}
				if err != nil {
					b.Error(err)
					return
				}
				tag, err := pool.Exec(ctx, plainDone, id)
				if err != nil || tag.RowsAffected() != 1 {
					b.Errorf("done %d: %v, %v", id, tag, err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
}

// leasedSetup, leasedEnqueue and leasedRun use only leasequeue's public
// API: MigratePostgres, NewPostgresSource, Enqueue, New, Run.
func leasedSetup(b *testing.B, pool *pgxpool.Pool) {
	ctx := context.Background()
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		b.Fatal(err)
	}
	if err := leasequeue.MigratePostgres(ctx, pool, leasequeue.PostgresOptions{}); err != nil {
		b.Fatal(err)
	}
}

func leasedEnqueue(b *testing.B, pool *pgxpool.Pool, queue string, items int) {
	src := leasedSource(b, pool, queue)
	ids := make([]string, items)
	for i := range ids {
		ids[i] = fmt.Sprintf("item-%07d", i)
	}
	for i := 0; i < len(ids); i += 10000 {
		if _, err := src.Enqueue(context.Background(), ids[i:min(i+10000, len(ids))]...); err != nil {
			b.Fatal(err)
		}
	}
}

func leasedSource(b *testing.B, pool *pgxpool.Pool, queue string) *leasequeue.PostgresSource {
	src, err := leasequeue.NewPostgresSource(pool, queue, leasequeue.PostgresOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return src
}

// leasedRun runs one Queue with Concurrency workers, as one process of a
// service would, and stops it once every item's completion is reported.
func leasedRun(b *testing.B, pool *pgxpool.Pool, queue string, items, workers int) {
	store, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	client, err := lease.NewClient(store, lease.ClientOptions{Owner: "bench-worker"})
	if err != nil {
		b.Fatal(err)
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: hide})
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
	q, err := leasequeue.New(client, leasedSource(b, pool, queue), leasequeue.Options{
		Name: queue, Policy: policy, Concurrency: workers, PollEvery: pollEvery, Observer: obs,
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = q.Run(ctx, func(context.Context, *leasequeue.Claim) error { return nil })
	if n := done.Load(); n != int64(items) {
		b.Fatalf("leasequeue: %d of %d items completed", n, items)
	}
}

// riverArgs is the River job of the benchmark; riverWorker does nothing
// with it.
type riverArgs struct{}

func (riverArgs) Kind() string { return "bench_noop" }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
}

func (riverWorker) Work(context.Context, *river.Job[riverArgs]) error { return nil }

func riverSetup(b *testing.B, pool *pgxpool.Pool) {
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Migrate(context.Background(), rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
}

func riverEnqueue(b *testing.B, pool *pgxpool.Pool, queue string, items int) {
	// An insert-only client (no Queues) inserts the jobs before the
	// working client starts.
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	params := make([]river.InsertManyParams, 0, 10000)
	for i := 0; i < items; i += cap(params) {
		params = params[:0]
		for range min(cap(params), items-i) {
			params = append(params, river.InsertManyParams{Args: riverArgs{}, InsertOpts: &river.InsertOpts{Queue: queue}})
		}
		if _, err := c.InsertManyFast(context.Background(), params); err != nil {
			b.Fatal(err)
		}
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// riverRun runs one River client with MaxWorkers workers on queue and
// stops it once every job's completion is reported (River reports a
// completion after its completer wrote it).
func riverRun(b *testing.B, pool *pgxpool.Pool, queue string, items, workers int) {
	ws := river.NewWorkers()
	river.AddWorker(ws, riverWorker{})
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:            quiet,
		Queues:            map[string]river.QueueConfig{queue: {MaxWorkers: workers}},
		Workers:           ws,
		FetchCooldown:     pollEvery,
		FetchPollInterval: pollEvery,
	})
	if err != nil {
		b.Fatal(err)
	}
	events, cancel := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: items + 1, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	timeout := time.After(5 * time.Minute)
	for n := 0; n < items; n++ {
		select {
		case <-events:
		case <-timeout:
			b.Fatalf("river: %d of %d jobs completed", n, items)
		}
	}
	if err := c.Stop(ctx); err != nil {
		b.Fatal(err)
	}
}

func exec(b *testing.B, pool *pgxpool.Pool, sql string, args ...any) {
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		b.Fatal(err)
	}
}

var runs atomic.Int64

// statements is a pgx tracer that counts the statements sent on a pool,
// one per query and one per query of a batch: with allocs/op, the cost of
// an item that the machine's load does not change.
type statements struct{ n atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}

func (*statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (*statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *statements) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) { s.n.Add(1) }

func (*statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// BenchmarkQueue processes b.N items with each impl at each worker count,
// each on a fresh database of one PostgreSQL server; ns/op is the wall
// time per item, items/s the throughput and stmts/item the statements
// sent per item (the impl's background work included). The items are
// enqueued and the tables vacuumed before the clock starts.
func BenchmarkQueue(b *testing.B) {
	srv := testserver.Postgres(b)
	for _, w := range workerCounts {
		for _, im := range impls {
			b.Run(fmt.Sprintf("workers=%d/impl=%s", w, im.name), func(b *testing.B) {
				cfg, err := pgxpool.ParseConfig(srv.NewDatabase(b))
				if err != nil {
					b.Fatal(err)
				}
				cfg.MaxConns = int32(2*w + 4)
				stmts := &statements{}
				cfg.ConnConfig.Tracer = stmts
				pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer pool.Close()
				im.setup(b, pool)
				queue := fmt.Sprintf("bench-%d", runs.Add(1))
				im.enqueue(b, pool, queue, b.N)
				exec(b, pool, "VACUUM ANALYZE")
				stmts.n.Store(0)
				b.ResetTimer()
				start := time.Now()
				im.run(b, pool, queue, b.N, w)
				elapsed := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "items/s")
				b.ReportMetric(float64(stmts.n.Load())/float64(b.N), "stmts/item")
			})
		}
	}
}
