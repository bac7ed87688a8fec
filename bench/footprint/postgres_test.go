package footprint_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testserver"
	"github.com/golib/lease/lease"
)

// postgresBackend measures the lease table of a fresh database on the
// shared PostgreSQL server of the test harness (or LEASE_POSTGRES_URL).
// The control is a second lease table in the same database, truncated
// before each point.
type postgresBackend struct {
	pool     *pgxpool.Pool
	store    *leasepostgres.Store
	ctlTable string
	tgt, ctl *side
	version  string
	settings string
}

// ctlOptions are the control table's.
var ctlOptions = leasepostgres.Options{Table: "control_leases"}

func openPostgres(b *testing.B, cfg config) backend {
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(testserver.Postgres(b).NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	pc.MaxConns = int32(cfg.workers + 4) // the workers, the sweep's lease and its page, a listener
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	be := &postgresBackend{pool: pool}
	for _, o := range []leasepostgres.Options{{}, ctlOptions} {
		if err := leasepostgres.Migrate(ctx, pool, o); err != nil {
			b.Fatal(err)
		}
	}
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
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version'),
    format('fsync=%s synchronous_commit=%s shared_buffers=%s autovacuum=%s',
           current_setting('fsync'), current_setting('synchronous_commit'),
           current_setting('shared_buffers'), current_setting('autovacuum'))`).Scan(&be.version, &be.settings); err != nil {
		b.Fatal(err)
	}

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

func (be *postgresBackend) target() *side  { return be.tgt }
func (be *postgresBackend) control() *side { return be.ctl }

func (be *postgresBackend) resetControl(ctx context.Context) error {
	_, err := be.pool.Exec(ctx, "TRUNCATE "+be.ctlTable)
	return err
}

func (be *postgresBackend) describe(cfg config) string {
	return fmt.Sprintf("PostgreSQL %s (%s), table %s, Retention %v; control: table %s in the same database, truncated before each point",
		be.version, be.settings, be.store.Table(), cfg.retention, be.ctlTable)
}

// flushStats makes every idle connection of the pool send its pending
// table statistics now (a backend sends them at most once a second, and
// when idle only after 10s), so that pg_stat_user_tables counts every
// statement so far. The pool is idle between the phases of the run.
func (be *postgresBackend) flushStats(ctx context.Context) error {
	conns := be.pool.AcquireAllIdle(ctx)
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

func (be *postgresBackend) work(ctx context.Context) (float64, string, error) {
	var n int64
	err := be.pool.QueryRow(ctx, `SELECT autovacuum_count + autoanalyze_count FROM pg_stat_user_tables WHERE relid = $1::regclass`,
		be.store.Table()).Scan(&n)
	return float64(n), "autovacuums+autoanalyzes meanwhile", err
}

// beforeSweep flushes the statistics of the last point's inserts before
// the sweep's deletes: PostgreSQL clamps n_live_tup at zero whenever a
// flush would take it below, so deletes counted before the inserts they
// delete would leave it too high.
func (be *postgresBackend) beforeSweep(ctx context.Context) error { return be.flushStats(ctx) }

func (be *postgresBackend) snapshot(ctx context.Context, name string) (stage, error) {
	if err := be.flushStats(ctx); err != nil {
		return stage{}, err
	}
	var total, table, indexes, live, dead, autovacuums, autoanalyzes, rows, leases, others, lastPage int64
	err := be.pool.QueryRow(ctx, `SELECT pg_total_relation_size(s.relid), pg_table_size(s.relid), pg_indexes_size(s.relid),
       s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.autoanalyze_count
FROM pg_stat_user_tables AS s WHERE s.relid = $1::regclass`, be.store.Table()).Scan(&total, &table, &indexes, &live, &dead, &autovacuums, &autoanalyzes)
	if err != nil {
		return stage{}, err
	}
	// The last page holding a row: VACUUM truncates the empty pages after
	// it, and only those.
	err = be.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE expires_at > statement_timestamp()), count(*) FILTER (WHERE key <> $1),
       coalesce(max((ctid::text::point)[0]), -1)::bigint
FROM `+be.store.Table(), lease.SweepKey).Scan(&rows, &leases, &others, &lastPage)
	if err != nil {
		return stage{}, err
	}
	return stage{name: name, figs: []figure{
		{"total (pg_total_relation_size)", "total-bytes", float64(total)},
		{"table (pg_table_size)", "table-bytes", float64(table)},
		{"indexes (pg_indexes_size)", "index-bytes", float64(indexes)},
		{"rows", "rows", float64(rows)},
		{"rows but " + lease.SweepKey, "rows-but-sweep", float64(others)},
		{"live leases", "live-leases", float64(leases)},
		{"n_live_tup", "live-tup", float64(live)},
		{"n_dead_tup", "dead-tup", float64(dead)},
		{"autovacuums", "autovacuums", float64(autovacuums)},
		{"autoanalyzes", "autoanalyzes", float64(autoanalyzes)},
		{"last page with a row", "last-row-page", float64(lastPage)},
	}}, nil
}

// settle takes the stage "after" as the sweep left the table, then runs
// the VACUUM that autovacuum would run soon after (a million deleted rows
// are far above its threshold) and takes the stage "vacuumed".
func (be *postgresBackend) settle(ctx context.Context) ([]stage, error) {
	after, err := be.snapshot(ctx, "after")
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if _, err := be.pool.Exec(ctx, "VACUUM "+be.store.Table()); err != nil {
		return nil, err
	}
	took := time.Since(start)
	progress("postgres: VACUUM took %v", took.Round(time.Millisecond))
	vacuumed, err := be.snapshot(ctx, "vacuumed")
	if err != nil {
		return nil, err
	}
	vacuumed.figs = append(vacuumed.figs, figure{"VACUUM took", "vacuum-s", took.Seconds()})
	return []stage{after, vacuumed}, nil
}

func (be *postgresBackend) footprintGoal(stages []stage) (string, bool) {
	var after stage
	for _, st := range stages {
		if st.name == "after" {
			after = st
		}
	}
	others, leases := after.get("rows-but-sweep"), after.get("live-leases")
	return fmt.Sprintf("rows after the retention and a sweep ≤ live leases: %d rows, %d of them not the sweep's own %s (kept for its retention), %d live leases",
		int64(after.get("rows")), int64(others), lease.SweepKey, int64(leases)), others <= leases
}
