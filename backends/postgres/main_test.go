package postgres_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// newDatabase returns the URL of a fresh database on the shared server.
func newDatabase(t testing.TB) string {
	t.Helper()
	return testserver.Postgres(t).NewDatabase(t)
}

// newPool returns a pool on url, closed when t ends; configure, if not nil,
// adjusts its configuration first.
func newPool(t testing.TB, url string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgxpool.ParseConfig: %v", err)
	}
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgxpool.NewWithConfig: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newStore migrates o's table on pool and returns a Store on it, closed
// when t ends.
func newStore(t testing.TB, pool *pgxpool.Pool, o leasepostgres.Options) *leasepostgres.Store {
	t.Helper()
	if err := leasepostgres.Migrate(ctxT(t), pool, o); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s, err := leasepostgres.New(pool, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// freshStore returns a Store on a fresh database of the shared server.
func freshStore(t testing.TB, o leasepostgres.Options) (*leasepostgres.Store, *pgxpool.Pool) {
	t.Helper()
	pool := newPool(t, newDatabase(t), nil)
	return newStore(t, pool, o), pool
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestExamples runs the package's examples against a fresh database of the
// shared server.
func TestExamples(t *testing.T) {
	databaseURL = newDatabase(t)
	Example()
	ExampleCheckGuard()
}
