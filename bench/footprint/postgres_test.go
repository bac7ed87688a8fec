package footprint_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// newPool returns a pool on a fresh database of the shared PostgreSQL
// server of the test harness (or LEASE_POSTGRES_URL), with a connection
// for each worker and a few more (a sweep's lease and its page, a
// listener).
func newPool(b *testing.B, cfg config) *pgxpool.Pool {
	pc, err := pgxpool.ParseConfig(testserver.Postgres(b).NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	pc.MaxConns = int32(cfg.workers + 4)
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// A pgMeter takes the footprint of one table: its sizes and its
// statistics, and the rows its backend counts.
type pgMeter struct {
	pool     *pgxpool.Pool
	table    string // quoted and qualified
	version  string
	settings string
	// rows returns the backend's own counts of the table's rows, as
	// figures.
	rows func(ctx context.Context) ([]figure, error)
}

func newPGMeter(b *testing.B, pool *pgxpool.Pool, table string, rows func(context.Context) ([]figure, error)) *pgMeter {
	m := &pgMeter{pool: pool, table: table, rows: rows}
	if err := pool.QueryRow(context.Background(), `SELECT current_setting('server_version'),
    format('fsync=%s synchronous_commit=%s shared_buffers=%s autovacuum=%s',
           current_setting('fsync'), current_setting('synchronous_commit'),
           current_setting('shared_buffers'), current_setting('autovacuum'))`).Scan(&m.version, &m.settings); err != nil {
		b.Fatal(err)
	}
	return m
}

// flushStats makes every idle connection of the pool send its pending
// table statistics now (a backend sends them at most once a second, and
// when idle only after 10s), so that pg_stat_user_tables counts every
// statement so far. The pool is idle between the phases of the run.
func (m *pgMeter) flushStats(ctx context.Context) error {
	conns := m.pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for _, c := range conns {
		if _, err := c.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
			return err
		}
	}
	return nil
}

// beforeSweep flushes the statistics of the last point's inserts before
// the sweep's deletes: PostgreSQL clamps n_live_tup at zero whenever a
// flush would take it below, so deletes counted before the inserts they
// delete would leave it too high.
func (m *pgMeter) beforeSweep(ctx context.Context) error { return m.flushStats(ctx) }

func (m *pgMeter) work(ctx context.Context) ([]figure, error) {
	if err := m.flushStats(ctx); err != nil {
		return nil, err
	}
	var seq, autovacuums, autoanalyzes int64
	err := m.pool.QueryRow(ctx, `SELECT seq_scan, autovacuum_count, autoanalyze_count FROM pg_stat_user_tables WHERE relid = $1::regclass`,
		m.table).Scan(&seq, &autovacuums, &autoanalyzes)
	return []figure{
		{"seq scans meanwhile", "seq-scans", float64(seq)},
		{"autovacuums meanwhile", "autovacuums", float64(autovacuums)},
		{"autoanalyzes meanwhile", "autoanalyzes", float64(autoanalyzes)},
	}, err
}

func (m *pgMeter) snapshot(ctx context.Context, name string) (stage, error) {
	if err := m.flushStats(ctx); err != nil {
		return stage{}, err
	}
	var total, table, indexes, live, dead, autovacuums, autoanalyzes, lastPage int64
	err := m.pool.QueryRow(ctx, `SELECT pg_total_relation_size(s.relid), pg_table_size(s.relid), pg_indexes_size(s.relid),
       s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.autoanalyze_count
FROM pg_stat_user_tables AS s WHERE s.relid = $1::regclass`, m.table).Scan(&total, &table, &indexes, &live, &dead, &autovacuums, &autoanalyzes)
	if err != nil {
		return stage{}, err
	}
	// The last page holding a row: VACUUM truncates the empty pages after
	// it, and only those.
	if err := m.pool.QueryRow(ctx, `SELECT coalesce(max((ctid::text::point)[0]), -1)::bigint FROM `+m.table).Scan(&lastPage); err != nil {
		return stage{}, err
	}
	rows, err := m.rows(ctx)
	if err != nil {
		return stage{}, err
	}
	figs := []figure{
		{"total (pg_total_relation_size)", "total-bytes", float64(total)},
		{"table (pg_table_size)", "table-bytes", float64(table)},
		{"indexes (pg_indexes_size)", "index-bytes", float64(indexes)},
	}
	figs = append(figs, rows...)
	figs = append(figs,
		figure{"n_live_tup", "live-tup", float64(live)},
		figure{"n_dead_tup", "dead-tup", float64(dead)},
		figure{"autovacuums", "autovacuums", float64(autovacuums)},
		figure{"autoanalyzes", "autoanalyzes", float64(autoanalyzes)},
		figure{"last page with a row", "last-row-page", float64(lastPage)})
	return stage{name: name, figs: figs}, nil
}

// settle takes the stage "after" as the sweep left the table, then runs
// the VACUUM that autovacuum would run soon after (a million deleted rows
// are far above its threshold) and takes the stage "vacuumed".
func (m *pgMeter) settle(ctx context.Context) ([]stage, error) {
	after, err := m.snapshot(ctx, "after")
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if _, err := m.pool.Exec(ctx, "VACUUM "+m.table); err != nil {
		return nil, err
	}
	took := time.Since(start)
	progress("postgres: VACUUM took %v", took.Round(time.Millisecond))
	vacuumed, err := m.snapshot(ctx, "vacuumed")
	if err != nil {
		return nil, err
	}
	vacuumed.figs = append(vacuumed.figs, figure{"VACUUM took", "vacuum-s", took.Seconds()})
	return []stage{after, vacuumed}, nil
}

// stageNamed returns the stage called name.
func stageNamed(stages []stage, name string) stage {
	for _, st := range stages {
		if st.name == name {
			return st
		}
	}
	return stage{}
}

// postgresBackend measures the lease table of a fresh database. The
// control is a second lease table in the same database, truncated before
// each point.
type postgresBackend struct {
	*pgMeter
	store    *leasepostgres.Store
	ctlTable string
	tgt, ctl *side
}

// ctlOptions are the control table's.
var ctlOptions = leasepostgres.Options{Table: "control_leases"}

func openPostgres(b *testing.B, cfg config) backend {
	ctx := context.Background()
	pool := newPool(b, cfg)
	for _, o := range []leasepostgres.Options{{}, ctlOptions} {
		if err := leasepostgres.Migrate(ctx, pool, o); err != nil {
			b.Fatal(err)
		}
	}
	be := &postgresBackend{}
	var err error
	if be.store, err = leasepostgres.New(pool, leasepostgres.Options{Retention: cfg.retention}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.store.Close() })
	o := ctlOptions
	o.Retention = cfg.retention
	ctlStore, err := leasepostgres.New(pool, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ctlStore.Close() })
	be.ctlTable = ctlStore.Table()
	be.tgt, be.ctl = newSide(b, be.store, "k"), newSide(b, ctlStore, "c")
	be.pgMeter = newPGMeter(b, pool, be.store.Table(), be.rows)

	// The start is the empty table, with every connection of the pool
	// open and its statements prepared (warm-up pairs on both tables and
	// one sweep), the warm-up's rows gone: TRUNCATE, as a table fresh
	// from its migration.
	for _, s := range []*side{be.tgt, be.ctl} {
		if err := warmUp(ctx, s, cfg); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := be.tgt.client.Sweep(ctx); err != nil {
		b.Fatal(err)
	}
	// The warm-up's statistics first, or they would count after the
	// TRUNCATE that resets the table's.
	if err := be.flushStats(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "TRUNCATE "+be.store.Table()+", "+be.ctlTable); err != nil {
		b.Fatal(err)
	}
	return be
}

func (be *postgresBackend) target() driver  { return be.tgt }
func (be *postgresBackend) control() driver { return be.ctl }
func (be *postgresBackend) what() string    { return "acquire→release pairs (latency: the pair)" }

func (be *postgresBackend) resetControl(ctx context.Context) error {
	_, err := be.pool.Exec(ctx, "TRUNCATE "+be.ctlTable)
	return err
}

func (be *postgresBackend) sweep(ctx context.Context) (int, string, error) {
	n, err := be.tgt.client.Sweep(ctx)
	return n, "Client.Sweep", err
}

func (be *postgresBackend) describe(cfg config) string {
	return fmt.Sprintf("lease records, PostgreSQL %s (%s), table %s, Retention %v; control: table %s in the same database, truncated before each point",
		be.version, be.settings, be.table, cfg.retention, be.ctlTable)
}

// rows counts the lease table's rows, those that are live leases, and
// those but the sweep's own lease.
func (be *postgresBackend) rows(ctx context.Context) ([]figure, error) {
	var rows, leases, others int64
	err := be.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE expires_at > statement_timestamp()), count(*) FILTER (WHERE key <> $1)
FROM `+be.table, lease.SweepKey).Scan(&rows, &leases, &others)
	return []figure{
		{"rows", "rows", float64(rows)},
		{"rows but " + lease.SweepKey, "rows-but-sweep", float64(others)},
		{"live leases", "live-leases", float64(leases)},
	}, err
}

func (be *postgresBackend) footprintGoal(stages []stage) (string, bool) {
	after := stageNamed(stages, "after")
	others, leases := after.get("rows-but-sweep"), after.get("live-leases")
	return fmt.Sprintf("rows after the retention and a sweep ≤ live leases: %d rows, %d of them not the sweep's own %s (kept for its retention), %d live leases",
		int64(after.get("rows")), int64(others), lease.SweepKey, int64(leases)), others <= leases
}
