package postgres_test

import (
	"testing"
	"time"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// suiteTTL is the lease TTL of the suite's subtests that wait for expiry:
// long enough that a loaded machine's stalls do not expire a lease that a
// subtest expects to be held.
const suiteTTL = 1500 * time.Millisecond

// suiteRetention is the retention of the suite's Sweeper subtests.
const suiteRetention = time.Second

func TestConformance(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	short, _ := freshStore(t, leasepostgres.Options{Retention: suiteRetention})
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend:          func(*testing.T) lease.Backend { return s },
		NewRetentionBackend: func(*testing.T) lease.Backend { return short },
		Retention:           suiteRetention,
		TTL:                 suiteTTL,
		Reconnect:           func(t *testing.T) { terminateListener(t, pool) },
	})
}

// terminateListener ends the session of the release listener on pool's
// database, which then connects and listens again by itself. The Store's
// other connections stay: pgxpool hands out a connection idle for less
// than a second without checking it, so ending them would fail the
// statement that gets one next, which is no test of the listener.
func terminateListener(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(ctxT(t), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`); err != nil {
		t.Fatal(err)
	}
}

func TestConformanceUnlogged(t *testing.T) {
	t.Parallel()
	s, _ := freshStore(t, leasepostgres.Options{Schema: "leases unlogged", Table: "Lease \"Table\"", Unlogged: true})
	short, _ := freshStore(t, leasepostgres.Options{Schema: "leases unlogged", Table: "short \"retention\"", Unlogged: true, Retention: suiteRetention})
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend:          func(*testing.T) lease.Backend { return s },
		NewRetentionBackend: func(*testing.T) lease.Backend { return short },
		Retention:           suiteRetention,
		TTL:                 suiteTTL,
	})
}

// TestConformanceAsyncCommit runs the suite on statements that also set
// synchronous_commit, with their extra result column.
func TestConformanceAsyncCommit(t *testing.T) {
	t.Parallel()
	s, _ := freshStore(t, leasepostgres.Options{AsyncCommit: true})
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend: func(*testing.T) lease.Backend { return s },
		TTL:        suiteTTL,
	})
}

// TestConformanceExecModes runs the suite with each of pgx's query exec
// modes, as a connection pooler in transaction mode needs some of them.
func TestConformanceExecModes(t *testing.T) {
	t.Parallel()
	url := newDatabase(t)
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec,
		pgx.QueryExecModeSimpleProtocol,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := newPool(t, url, func(c *pgxpool.Config) {
				c.ConnConfig.DefaultQueryExecMode = mode
				c.ConnConfig.StatementCacheCapacity = 0
				c.ConnConfig.DescriptionCacheCapacity = 0
				if mode == pgx.QueryExecModeCacheDescribe {
					c.ConnConfig.DescriptionCacheCapacity = 64
				}
			})
			s := newStore(t, pool, leasepostgres.Options{})
			leasetest.RunBackendSuite(t, leasetest.Suite{
				NewBackend: func(*testing.T) lease.Backend { return s },
				TTL:        suiteTTL,
			})
		})
	}
}
