package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasequeue/partition"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// The tables each set creates, and the version tables of each tool.
var (
	tables        = []string{"public.leases", "public.lease_fences", "public.lease_fences_floors", "public.leasequeue_jobs", "public.leasequeue_jobs_members"}
	versionTables = map[string][]string{
		"goose":          {"public.leases_goose_db_version", "public.lease_fences_goose_db_version", "public.leasequeue_jobs_goose_db_version"},
		"golang-migrate": {"public.leases_schema_migrations", "public.lease_fences_schema_migrations", "public.leasequeue_jobs_schema_migrations"},
	}
)

// TestTools migrates every set up, down and up again with each tool, and
// then runs the library's own operations on the tables the tool made.
func TestTools(t *testing.T) {
	for _, tool := range []string{"goose", "golang-migrate"} {
		t.Run(tool, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			dsn := testserver.Postgres(t).NewDatabase(t)
			pool, err := pgxpool.New(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()

			migrateTo(t, ctx, tool, dsn, false)
			requireTables(t, ctx, pool, true, append(tables, versionTables[tool]...)...)
			migrateTo(t, ctx, tool, dsn, true)
			requireTables(t, ctx, pool, false, tables...)
			migrateTo(t, ctx, tool, dsn, false)
			requireTables(t, ctx, pool, true, tables...)
			migrateTo(t, ctx, tool, dsn, false) // nothing left to do
			useTables(t, ctx, pool)

			// The library's own Migrate adopts the tables a tool made, and
			// records its versions apart from the tool's.
			if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
				t.Fatal(err)
			}
			if err := fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := leasequeue.MigratePostgres(ctx, pool, leasequeue.PostgresOptions{}); err != nil {
				t.Fatal(err)
			}
			migrateTo(t, ctx, tool, dsn, false)
			useTables(t, ctx, pool)
		})
	}
}

func migrateTo(t *testing.T, ctx context.Context, tool, dsn string, down bool) {
	t.Helper()
	var out bytes.Buffer
	if err := run(ctx, tool, dsn, down, &out); err != nil {
		t.Fatalf("run(%s, down=%v): %v\n%s", tool, down, err, out.String())
	}
}

// requireTables fails unless each of tables exists (or, with !exist, none
// does).
func requireTables(t *testing.T, ctx context.Context, pool *pgxpool.Pool, exist bool, tables ...string) {
	t.Helper()
	for _, name := range tables {
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1::text) IS NOT NULL", name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok != exist {
			t.Errorf("table %s exists: %v, want %v", name, ok, exist)
		}
	}
}

// useTables acquires a lease on the lease table, writes under its fence on
// the fences table, and claims and completes a queue item, checking that
// a stale token is refused.
func useTables(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	store, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	client, err := lease.NewClient(store, lease.ClientOptions{Owner: "migrate-test"})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	key := "migrate/" + t.Name()
	h, err := client.TryAcquire(ctx, key, policy)
	if err != nil {
		t.Fatal(err)
	}
	old := h.Snapshot()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h, err = client.TryAcquire(ctx, key, policy)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.WithoutCancel(ctx))
	if h.Token() <= old.Token {
		t.Fatalf("token %d after %d: tokens must rise", h.Token(), old.Token)
	}
	// Semaphores and sets of keys call functions that the migrations
	// create beside the table.
	if _, _, err := store.AcquirePermit(ctx, lease.AcquireRequest{Key: key + "/sem", Owner: "migrate-test", Nonce: "permit", TTL: 10 * time.Second}, 2); err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	if _, err := store.AcquireSet(ctx, []string{key + "/a", key + "/b"}, lease.AcquireRequest{Owner: "migrate-test", Nonce: "set", TTL: 10 * time.Second}); err != nil {
		t.Fatalf("AcquireSet: %v", err)
	}
	write := func(tx pgx.Tx) error { return nil }
	if err := fencepostgres.Tx(ctx, pool, h.Snapshot(), []string{"migrate/resource"}, write); err != nil {
		t.Fatalf("fencepostgres.Tx: %v", err)
	}
	if err := fencepostgres.Tx(ctx, pool, old, []string{"migrate/resource"}, write); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("fencepostgres.Tx with the older token: %v, want fence.ErrStale", err)
	}

	src, err := leasequeue.NewPostgresSource(pool, "migrate", leasequeue.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := "item-" + time.Now().Format("150405.000000000")
	if _, err := src.Enqueue(ctx, id); err != nil {
		t.Fatal(err)
	}
	q, err := leasequeue.New(client, src, leasequeue.Options{Name: "migrate", Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	it, err := src.Item(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if it.State != leasequeue.Done {
		t.Fatalf("item %s is %s after Complete, want done", id, it.State)
	}
	roster, err := partition.NewPostgresRoster(pool, leasequeue.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := roster.Join(ctx, "migrate", "worker-1"); err != nil {
		t.Fatal(err)
	}
}

// TestGooseLayout checks what goose needs of each set: one file per
// version, each with both sections. (goose.NewProvider refuses two files
// of one version, as the golang-migrate layout has.)
func TestGooseLayout(t *testing.T) {
	for _, s := range sets {
		entries, err := fs.ReadDir(s.goose, ".")
		if err != nil {
			t.Fatal(err)
		}
		ups, err := fs.Glob(s.migrations, "*.up.sql")
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != len(ups) || len(entries) == 0 {
			t.Errorf("%s: %d goose files for %d up migrations", s.table, len(entries), len(ups))
		}
		for _, e := range entries {
			b, err := fs.ReadFile(s.goose, e.Name())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b, []byte("-- +goose Up\n")) || !bytes.Contains(b, []byte("\n-- +goose Down\n")) {
				t.Errorf("%s: %s lacks a goose section:\n%s", s.table, e.Name(), b)
			}
		}
	}
}
