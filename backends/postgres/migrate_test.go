package postgres_test

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/lease"
)

// TestMigrateConcurrently starts Migrate from many "replicas" at once: all
// succeed and each migration is applied once.
// TestMigrateConcurrently starts ten replicas' migrations at once, with
// each default transaction isolation a database may be set to: one
// applies them, the others wait and find nothing to do.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	for _, iso := range []string{"read committed", "repeatable read", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			pool := newPool(t, newDatabase(t), func(c *pgxpool.Config) {
				c.MaxConns = 10
				c.ConnConfig.RuntimeParams["default_transaction_isolation"] = iso
			})
			ctx := ctxT(t)
			var wg sync.WaitGroup
			errs := make(chan error, 10)
			for range 10 {
				wg.Go(func() { errs <- leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("Migrate: %v", err)
				}
			}
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM public.leases_migrations").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if want := countUpMigrations(t); n != want {
				t.Fatalf("%d versions recorded, want %d", n, want)
			}
		})
	}
}

func countUpMigrations(t *testing.T) int {
	t.Helper()
	files, err := fs.Glob(leasepostgres.Migrations(), "*.up.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no up migrations: %v", err)
	}
	return len(files)
}

// TestHostileNames uses schema and table names that would break out of
// an unquoted statement: they name a table like any other, and nothing
// else is touched.
func TestHostileNames(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDatabase(t), nil)
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, "CREATE TABLE victim (x int)"); err != nil {
		t.Fatal(err)
	}
	for _, o := range []leasepostgres.Options{
		{Schema: `public"; DROP TABLE victim; --`, Table: `leases`},
		{Table: `x" (a int); DROP TABLE victim; --`},
		{Schema: "Ünïcødé 🔒", Table: "Robert'); DROP TABLE victim;--"},
		{Table: "public.leases"}, // a dot inside a name is just a character
		{Schema: "s", Table: strings.Repeat("t", 52)},
	} {
		s := newStore(t, pool, o)
		if err := leasepostgres.Migrate(ctx, pool, o); err != nil {
			t.Fatalf("second Migrate(%+v): %v", o, err)
		}
		tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n", TTL: time.Minute})
		if err != nil {
			t.Fatalf("Acquire with %+v: %v", o, err)
		}
		if r, err := s.Inspect(ctx, "k"); err != nil || !r.Held || r.Token != tok {
			t.Fatalf("Inspect with %+v = %+v, %v", o, r, err)
		}
		var exists bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.Table()).Scan(&exists); err != nil || !exists {
			t.Fatalf("table %s: exists=%v, %v", s.Table(), exists, err)
		}
	}
	if _, err := pool.Exec(ctx, "SELECT * FROM victim"); err != nil {
		t.Fatalf("the victim table is gone: %v", err)
	}
}

func TestNewRejectsBadNames(t *testing.T) {
	t.Parallel()
	for _, o := range []leasepostgres.Options{
		{Schema: strings.Repeat("s", 64)},
		{Table: strings.Repeat("t", 53)},
		{Table: "nul\x00byte"},
	} {
		if _, err := leasepostgres.New(&pgxpool.Pool{}, o); err == nil {
			t.Errorf("New(%q, %q) succeeded", o.Schema, o.Table)
		}
		if err := leasepostgres.Migrate(context.Background(), &pgxpool.Pool{}, o); err == nil {
			t.Errorf("Migrate(%q, %q) succeeded", o.Schema, o.Table)
		}
	}
}

// TestMigrateUnlogged converts the table back and forth.
func TestMigrateUnlogged(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDatabase(t), nil)
	ctx := ctxT(t)
	persistence := func() string {
		var p string
		if err := pool.QueryRow(ctx, "SELECT relpersistence::text FROM pg_class WHERE oid = 'public.leases'::regclass").Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, unlogged := range []bool{true, true, false, true} {
		if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{Unlogged: unlogged}); err != nil {
			t.Fatal(err)
		}
		want := map[bool]string{true: "u", false: "p"}[unlogged]
		if got := persistence(); got != want {
			t.Fatalf("Unlogged %v: relpersistence %q, want %q", unlogged, got, want)
		}
	}
}

// TestMigrationsForTools applies the exported files the way a migration
// tool does, every up file in order and every down file in reverse, and
// checks that Migrate adopts a table created that way and that the goose
// files say the same.
func TestMigrationsForTools(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDatabase(t), nil)
	ctx := ctxT(t)
	fsys := leasepostgres.Migrations()
	read := func(fsys fs.FS, name string) string {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ups, err := fs.Glob(fsys, "*.up.sql")
	if err != nil || len(ups) < 3 {
		t.Fatalf("up files %q, %v", ups, err)
	}
	for _, up := range ups {
		if _, err := pool.Exec(ctx, read(fsys, up)); err != nil {
			t.Fatalf("%s: %v", up, err)
		}
	}
	var comment string
	if err := pool.QueryRow(ctx, "SELECT obj_description('public.leases'::regclass, 'pg_class')").Scan(&comment); err != nil || !strings.Contains(comment, "removed a retention after its lease ended") {
		t.Fatalf("the table's comment after the up files: %q, %v", comment, err)
	}
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		t.Fatalf("Migrate after a tool: %v", err)
	}
	s, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for i := len(ups) - 1; i >= 0; i-- {
		down := strings.TrimSuffix(ups[i], ".up.sql") + ".down.sql"
		if _, err := pool.Exec(ctx, read(fsys, down)); err != nil {
			t.Fatalf("%s: %v", down, err)
		}
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('public.leases') IS NOT NULL").Scan(&exists); err != nil || exists {
		t.Fatalf("after the down files: exists=%v, %v", exists, err)
	}

	for _, up := range ups {
		name := strings.TrimSuffix(up, ".up.sql")
		goose := read(leasepostgres.GooseMigrations(), name+".sql")
		if want := "-- +goose Up\n" + read(fsys, up) + "\n-- +goose Down\n" + read(fsys, name+".down.sql"); goose != want {
			t.Errorf("goose/%s.sql differs from the up and down files:\n%s\nwant:\n%s", name, goose, want)
		}
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || !(strings.HasSuffix(e.Name(), ".up.sql") || strings.HasSuffix(e.Name(), ".down.sql")) {
			t.Errorf("Migrations() has %q, which golang-migrate does not expect", e.Name())
		}
	}
}

// TestMigrateInsideTransaction runs Migrate in a caller's transaction,
// which it uses as a savepoint.
func TestMigrateInsideTransaction(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDatabase(t), nil)
	ctx := ctxT(t)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return leasepostgres.Migrate(ctx, tx, leasepostgres.Options{Table: "in_tx"})
	})
	if err != nil {
		t.Fatal(err)
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('public.in_tx') IS NOT NULL").Scan(&exists); err != nil || !exists {
		t.Fatalf("exists=%v, %v", exists, err)
	}
}

// TestMigrateDropsTokenCheck checks that Migrate leaves no CHECK
// constraint on the lease table, whatever the table is called: PostgreSQL
// builds CHECK expressions anew for every write, about 7% of the server's
// instructions for an acquire and a release.
func TestMigrateDropsTokenCheck(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDatabase(t), nil)
	ctx := ctxT(t)
	for _, o := range []leasepostgres.Options{
		{},
		{Schema: "Ünïcødé 🔒", Table: "Robert'); DROP TABLE victim;--"},
		{Schema: "s", Table: strings.Repeat("t", 52)},
	} {
		if err := leasepostgres.Migrate(ctx, pool, o); err != nil {
			t.Fatalf("Migrate(%+v): %v", o, err)
		}
		s := newStore(t, pool, o)
		var n int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_constraint WHERE conrelid = to_regclass($1::text) AND contype = 'c'", s.Table()).Scan(&n)
		if err != nil || n != 0 {
			t.Errorf("table %s has %d CHECK constraints after Migrate (%v), want 0", s.Table(), n, err)
		}
	}
}

// TestMigrateComment: Migrate gives a table of any name the comment of
// the latest migration.
func TestMigrateComment(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDatabase(t), nil)
	s := newStore(t, pool, leasepostgres.Options{Schema: "Ünïcødé 🔒", Table: "it's a table"})
	var comment string
	if err := pool.QueryRow(ctxT(t), "SELECT obj_description(to_regclass($1::text), 'pg_class')", s.Table()).Scan(&comment); err != nil || !strings.Contains(comment, "removed a retention after its lease ended") {
		t.Fatalf("the comment of %s: %q, %v", s.Table(), comment, err)
	}
}
