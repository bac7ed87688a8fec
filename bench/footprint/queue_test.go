package footprint_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasepostgres "github.com/golib/lease/backends/postgres"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

// BenchmarkQueueFootprint is BenchmarkFootprint for package leasequeue:
// cfg.keys distinct items enqueued, claimed and completed (a no-op
// handler) by one Queue.Run, with DoneRetention and DeadRetention
// cfg.retention and Run's own background prune every retention
// (Options.PruneEvery), as in a deployment; the footprint of the queue's
// table or keys at the start, after the drive (the peak, with the
// largest seen on Valkey: the prunes keep it to about a retention and a
// prune interval of items, not all of them) and after the retention and
// a Queue.Prune; and the throughput (enqueue included) and claim→complete
// latency of fresh items at 0, a tenth of and all the items driven, and
// after the prune.
func BenchmarkQueueFootprint(b *testing.B) {
	cfg := loadConfig(b)
	for _, bk := range []struct {
		name string
		open func(*testing.B, config) backend
	}{{"valkey", openQueueValkey}, {"postgres", openQueuePostgres}} {
		b.Run("backend="+bk.name, func(b *testing.B) { story(b, cfg, "queue "+bk.name, bk.open(b, cfg)) })
	}
}

// queueBatchSize is how many items a queueSide enqueues at a time while
// driving.
const queueBatchSize = 10_000

// queuePolicy is the policy of the items' claims: a worker never dies
// here, so its TTL only needs to outlast a handler, which returns at
// once.
var queuePolicy = func() lease.Policy {
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	return p
}()

// queuePollEvery is how long an idle Run waits before it asks the source
// again: a batch waits at most that long to be seen, and the idle Run of
// the other side costs a claim request that often.
const queuePollEvery = 10 * time.Millisecond

// A queueSide is one leasequeue.Queue, run by one Run from open to the
// end of the benchmark, and the items it has driven. Run is never
// stopped between batches: a claim cut off by stopping it may still be
// applied on the server, and its items then wait out their claim's TTL.
type queueSide struct {
	q       *leasequeue.Queue
	enqueue func(ctx context.Context, ids ...string) (int, error)
	prefix  string // of its item IDs: prefix + a 7-digit number
	next    atomic.Int64
	batch   atomic.Pointer[queueBatch]
	pruned  atomic.Int64 // items removed by Run's background prunes
	prunes  atomic.Int64
}

// A queueBatch is the items of one enqueue, until the last is completed.
type queueBatch struct {
	want   int64
	record bool
	done   atomic.Int64
	over   chan struct{} // closed at the last completion

	mu    sync.Mutex
	end   time.Time // of the last completion
	lat   []time.Duration
	errs  int64
	first error
}

func (bt *queueBatch) fail(err error) {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	bt.errs++
	if bt.first == nil {
		bt.first = err
	}
}

// newQueueSide starts a Run of the queue named "fp" on src, with the
// prune lease on client, processing workers items at once, and pruning
// every pruneEvery (negative: never).
func newQueueSide(b *testing.B, client *lease.Client, src leasequeue.Source, enqueue func(context.Context, ...string) (int, error), prefix string, workers int, pruneEvery time.Duration) *queueSide {
	s := &queueSide{enqueue: enqueue, prefix: prefix}
	obs := leasequeue.ObserverFunc(func(ev leasequeue.Event) {
		if e, ok := ev.(*leasequeue.Pruned); ok {
			s.prunes.Add(1)
			s.pruned.Add(int64(e.Removed))
			if e.Err != nil {
				progress("%s: background prune: %v", prefix, e.Err)
			}
			return
		}
		bt := s.batch.Load()
		if bt == nil {
			return
		}
		switch e := ev.(type) {
		case *leasequeue.Completed:
			if e.Err != nil {
				bt.fail(e.Err)
				return
			}
			if bt.record {
				bt.mu.Lock()
				bt.lat = append(bt.lat, e.Latency)
				bt.mu.Unlock()
			}
			if bt.done.Add(1) == bt.want {
				bt.mu.Lock()
				bt.end = time.Now()
				bt.mu.Unlock()
				close(bt.over)
			}
		case *leasequeue.Claimed:
			if e.Err != nil {
				bt.fail(e.Err)
			}
		case *leasequeue.Failed:
			bt.fail(fmt.Errorf("item %s failed: %w", e.ID, e.Cause))
		}
	})
	q, err := leasequeue.New(client, src, leasequeue.Options{
		Name: "fp", Policy: queuePolicy, Concurrency: workers, PollEvery: queuePollEvery,
		Observer: obs, PruneEvery: pruneEvery,
	})
	if err != nil {
		b.Fatal(err)
	}
	s.q = q
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := q.Run(ctx, func(context.Context, *leasequeue.Claim) error { return nil }); err != nil {
			progress("%s: Run: %v", prefix, err)
		}
	}()
	b.Cleanup(func() { stop(); <-done })
	return s
}

func (s *queueSide) driven() int64 { return s.next.Load() }

// run enqueues n fresh items, in batches of at most queueBatchSize, and
// waits for the Run to complete each batch before the next: into gets
// the time from each batch's first enqueue to its last completion, and
// the claim→complete latency of each item when record is set.
func (s *queueSide) run(ctx context.Context, n int64, _ int, into *sample, record bool) {
	for left := n; left > 0; {
		k := min(left, queueBatchSize)
		base := s.next.Load()
		ids := make([]string, k)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s%07d", s.prefix, base+int64(i))
		}
		bt := &queueBatch{want: k, record: record, over: make(chan struct{})}
		s.batch.Store(bt)
		start := time.Now()
		for chunk := range slices.Chunk(ids, 1000) {
			if _, err := s.enqueue(ctx, chunk...); err != nil {
				bt.fail(err)
			}
		}
		select {
		case <-bt.over:
		case <-time.After(5 * time.Minute):
		}
		s.batch.Store(nil)
		bt.mu.Lock()
		end := bt.end
		if end.IsZero() {
			end = time.Now()
			bt.errs += k - bt.done.Load()
			bt.first = cmp(bt.first, fmt.Errorf("%d of %d items completed in 5 minutes", bt.done.Load(), k))
		}
		into.busy += end.Sub(start)
		into.lat = append(into.lat, bt.lat...)
		into.errs += bt.errs
		into.first = cmp(into.first, bt.first)
		bt.mu.Unlock()
		s.next.Add(k)
		left -= k
	}
}

// cmp returns the first error that is not nil.
func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// prune runs Queue.Prune, waiting its turn while Run's background prune
// holds the prune lease.
func (s *queueSide) prune(ctx context.Context) (int, error) {
	for range 120 {
		n, err := s.q.Prune(ctx)
		if !errors.Is(err, lease.ErrNotAcquired) {
			return n, err
		}
		time.Sleep(time.Second)
	}
	return 0, errors.New("the prune lease stayed taken for two minutes")
}

// warmUpQueue runs cfg.warmups() items of their own (prefix "w") through
// the side, so that the first point does not pay for what the queue, the
// connections and the server set up on first use, and prunes once. The
// caller removes what they left.
func warmUpQueue(ctx context.Context, s *queueSide, cfg config) error {
	saved := s.prefix
	s.prefix = "w"
	var smp sample
	s.run(ctx, cfg.warmups(), cfg.workers, &smp, true)
	s.prefix = saved
	s.next.Store(0)
	if smp.errs > 0 {
		return fmt.Errorf("warm-up: %d items failed: %w", smp.errs, smp.first)
	}
	_, err := s.prune(ctx)
	return err
}

// queueSweep is the backends' sweep: Queue.Prune, and what Run's
// background prunes removed before it.
func queueSweep(ctx context.Context, s *queueSide) (int, string, error) {
	n, err := s.prune(ctx)
	progress("Run's background prunes removed %d items in %d prunes", s.pruned.Load(), s.prunes.Load())
	return n, "Queue.Prune", err
}

// queueValkeyBackend measures a ValkeySource on the shared Valkey server
// of the test harness (or LEASE_VALKEY_ADDR), the queue's prune lease on
// a lease store on the same server. The control is a dedicated server,
// flushed before each point.
type queueValkeyBackend struct {
	*valkeyMeter
	ctlClient valkey.Client
	tgt, ctl  *queueSide
}

func openQueueValkey(b *testing.B, cfg config) backend {
	ctx := context.Background()
	client := valkeyClient(b, testserver.Valkey(b).Addr())
	be := &queueValkeyBackend{valkeyMeter: newValkeyMeter(b, client)}
	be.ctlClient = valkeyClient(b, testserver.StartValkey(b, testserver.ValkeyOptions{}).Addr())
	var stores []*leasevalkey.Store
	for i, c := range []valkey.Client{client, be.ctlClient} {
		store, err := leasevalkey.New(c, leasevalkey.Options{Retention: cfg.retention})
		if err != nil {
			b.Fatal(err)
		}
		stores = append(stores, store)
		src, err := leasequeue.NewValkeySource(c, "fp", leasequeue.ValkeyOptions{DoneRetention: cfg.retention, DeadRetention: cfg.retention})
		if err != nil {
			b.Fatal(err)
		}
		lc, err := lease.NewClient(store, lease.ClientOptions{Owner: "footprint", SweepEvery: -1})
		if err != nil {
			b.Fatal(err)
		}
		s := newQueueSide(b, lc, src, src.Enqueue, []string{"i", "c"}[i], cfg.workers, []time.Duration{cfg.retention, -1}[i])
		if i == 0 {
			be.tgt = s
		} else {
			be.ctl = s
		}
	}

	// The start is the server with the clients connected and every script
	// of the run loaded (warm-up items and a prune), but none of the
	// queue's keys: those the warm-up left are deleted, as is the prune
	// lease's record.
	for _, s := range []*queueSide{be.tgt, be.ctl} {
		if err := warmUpQueue(ctx, s, cfg); err != nil {
			b.Fatal(err)
		}
	}
	var doomed []string
	for cursor := uint64(0); ; {
		e, err := client.Do(ctx, client.B().Scan().Cursor(cursor).Match(leasequeue.DefaultValkeyPrefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			b.Fatal(err)
		}
		doomed = append(doomed, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	doomed = append(doomed, stores[0].RecordKey(be.tgt.q.PruneKey()))
	for chunk := range slices.Chunk(doomed, 1000) {
		if err := client.Do(ctx, client.B().Del().Key(chunk...).Build()).Error(); err != nil {
			b.Fatal(err)
		}
	}
	be.start(b, cfg)
	return be
}

func (be *queueValkeyBackend) target() driver  { return be.tgt }
func (be *queueValkeyBackend) control() driver { return be.ctl }
func (be *queueValkeyBackend) what() string {
	return "items enqueued→claimed→completed (latency: claim→complete)"
}

func (be *queueValkeyBackend) resetControl(ctx context.Context) error {
	return be.ctlClient.Do(ctx, be.ctlClient.B().Flushall().Sync().Build()).Error()
}

func (be *queueValkeyBackend) sweep(ctx context.Context) (int, string, error) {
	return queueSweep(ctx, be.tgt)
}

// settle needs no wait for expiry: Queue.Prune deletes the items' keys.
func (be *queueValkeyBackend) settle(ctx context.Context) ([]stage, error) {
	return be.valkeyMeter.settle(ctx, 10*time.Second)
}

func (be *queueValkeyBackend) describe(cfg config) string {
	return fmt.Sprintf("leasequeue ValkeySource, Valkey %s, standalone, DoneRetention %v, pruned by Run every %v; used_memory and DBSIZE of the whole server; control: a dedicated server",
		be.version, cfg.retention, cfg.retention)
}

// queuePostgresBackend measures a PostgresSource's table in a fresh
// database, the queue's prune lease on a lease table beside it. The
// control is a second queue table in the same database, truncated before
// each point.
type queuePostgresBackend struct {
	*pgMeter
	ctlTable string
	tgt, ctl *queueSide
}

func openQueuePostgres(b *testing.B, cfg config) backend {
	ctx := context.Background()
	pool := newPool(b, cfg)
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		b.Fatal(err)
	}
	store, err := leasepostgres.New(pool, leasepostgres.Options{Retention: cfg.retention})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	lc, err := lease.NewClient(store, lease.ClientOptions{Owner: "footprint", SweepEvery: -1})
	if err != nil {
		b.Fatal(err)
	}
	be := &queuePostgresBackend{}
	var tables []string
	for i, o := range []leasequeue.PostgresOptions{{}, {Table: "control_jobs"}} {
		if err := leasequeue.MigratePostgres(ctx, pool, o); err != nil {
			b.Fatal(err)
		}
		o.DoneRetention, o.DeadRetention = cfg.retention, cfg.retention
		src, err := leasequeue.NewPostgresSource(pool, "fp", o)
		if err != nil {
			b.Fatal(err)
		}
		tables = append(tables, src.Table())
		s := newQueueSide(b, lc, src, src.Enqueue, []string{"i", "c"}[i], cfg.workers, []time.Duration{cfg.retention, -1}[i])
		if i == 0 {
			be.tgt = s
		} else {
			be.ctl = s
		}
	}
	be.ctlTable = tables[1]
	be.pgMeter = newPGMeter(b, pool, tables[0], be.rows)

	// The start is the empty table, with every connection of the pool
	// open and its statements prepared (warm-up items on both tables and
	// a prune), the warm-up's rows gone: TRUNCATE, as a table fresh from
	// its migration.
	for _, s := range []*queueSide{be.tgt, be.ctl} {
		if err := warmUpQueue(ctx, s, cfg); err != nil {
			b.Fatal(err)
		}
	}
	if err := be.flushStats(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "TRUNCATE "+be.table+", "+be.ctlTable); err != nil {
		b.Fatal(err)
	}
	return be
}

func (be *queuePostgresBackend) target() driver  { return be.tgt }
func (be *queuePostgresBackend) control() driver { return be.ctl }
func (be *queuePostgresBackend) what() string {
	return "items enqueued→claimed→completed (latency: claim→complete)"
}

func (be *queuePostgresBackend) resetControl(ctx context.Context) error {
	_, err := be.pool.Exec(ctx, "TRUNCATE "+be.ctlTable)
	return err
}

func (be *queuePostgresBackend) sweep(ctx context.Context) (int, string, error) {
	return queueSweep(ctx, be.tgt)
}

func (be *queuePostgresBackend) describe(cfg config) string {
	return fmt.Sprintf("leasequeue PostgresSource, PostgreSQL %s (%s), table %s, DoneRetention %v, pruned by Run every %v; control: table %s in the same database, truncated before each point",
		be.version, be.settings, be.table, cfg.retention, cfg.retention, be.ctlTable)
}

// rows counts the queue table's rows, and those of unfinished items.
func (be *queuePostgresBackend) rows(ctx context.Context) ([]figure, error) {
	var rows, unfinished int64
	err := be.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state IN ('pending', 'running')) FROM `+be.table).Scan(&rows, &unfinished)
	return []figure{
		{"rows", "rows", float64(rows)},
		{"unfinished items", "unfinished", float64(unfinished)},
	}, err
}

func (be *queuePostgresBackend) footprintGoal(stages []stage) (string, bool) {
	after := stageNamed(stages, "after")
	rows, unfinished := after.get("rows"), after.get("unfinished")
	return fmt.Sprintf("rows after the retention and a prune ≤ unfinished items: %d rows, %d unfinished items", int64(rows), int64(unfinished)), rows <= unfinished
}
