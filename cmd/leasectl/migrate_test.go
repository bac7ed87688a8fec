package main_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// migration is one migration in migrate's JSON output.
type migration struct {
	Set     string `json:"set"`
	Table   string `json:"table"`
	Version int    `json:"version"`
	Name    string `json:"name"`
	Applied bool   `json:"applied"`
}

// migrations is migrate's JSON output.
type migrations struct {
	Migrations []migration `json:"migrations"`
}

// TestMigrate runs leasectl migrate on an empty database as an operator
// would: the status lists every migration pending (exit 3), a dry run
// lists them and applies nothing (exit 0), check and inspect name
// leasectl migrate, migrate applies them once, and check then covers the
// fences and queue tables too. An UNLOGGED lease table stays so.
func TestMigrate(t *testing.T) {
	t.Parallel()
	url := testserver.Postgres(t).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctl := func(args ...string) result { return run(t, nil, append([]string{"--postgres", url}, args...)...) }

	r := ctl("migrate", "--status", "--json")
	r.want(t, 3)
	st := decode[migrations](t, r)
	sets := map[string]int{}
	for _, m := range st.Migrations {
		if m.Applied {
			t.Fatalf("migrate --status on an empty database: %+v applied", m)
		}
		sets[m.Set]++
	}
	if len(sets) != 3 || !slices.ContainsFunc(st.Migrations, func(m migration) bool {
		return m.Name == "004_lease_history" && m.Table == `"public"."leases"`
	}) {
		t.Fatalf("migrate --status lists %+v; want the lease, fence and queue sets, with 004_lease_history", st.Migrations)
	}
	ctl("migrate", "--status").want(t, 3, "SET", "MIGRATION", "pending", "001_lease", "migration(s) pending: run leasectl migrate")
	ctl("migrate", "--dry-run").want(t, 0, "004_lease_history", "would apply", "dry run: nothing applied")
	ctl("migrate", "--dry-run", "--status").want(t, 2, "not both")
	ctl("migrate", "--only", "lease,bogus").want(t, 2, `--only "bogus"`)

	ctl("check").want(t, 3, `lease table "public"."leases" not found: run `+"`leasectl migrate`", `fences table "public"."lease_fences" not found`)
	ctl("inspect", "k").want(t, 1, "run `leasectl migrate`, or leasepostgres.Migrate")

	ctl("migrate", "--only", "lease").want(t, 0, "006_lease_handoff", "applied 6 migration(s)")
	r = ctl("migrate")
	r.want(t, 0, "lease_fences", "leasequeue_jobs")
	if strings.Contains(r.stdout, "001_lease\t") || strings.Contains(r.stdout, "lease \t") {
		t.Fatalf("migrate applied the lease migrations again:\n%s", r.stdout)
	}
	ctl("migrate").want(t, 0, "applied 0 migration(s)")
	ctl("migrate", "--status").want(t, 0, "applied "+time.Now().UTC().Format("2006-"))
	ctl("check").want(t, 0, "ok: no problem found")
	ctl("inspect", "k").want(t, 3, "no record")

	// The fences table gone: check says so, instead of a fence.Tx failing
	// after "ok".
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP TABLE public.lease_fences"); err != nil {
		t.Fatal(err)
	}
	ctl("check").want(t, 3, `fences table "public"."lease_fences" not found`, "leasectl migrate")

	// An UNLOGGED table, one migration behind, stays UNLOGGED.
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{Schema: "fast", Unlogged: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM fast.leases_migrations WHERE version = 4"); err != nil {
		t.Fatal(err)
	}
	ctl("--schema", "fast", "migrate", "--only", "lease").want(t, 0, "004_lease_history", "applied 1 migration(s)")
	var persistence string
	if err := pool.QueryRow(ctx, "SELECT relpersistence::text FROM pg_class WHERE oid = 'fast.leases'::regclass").Scan(&persistence); err != nil || persistence != "u" {
		t.Fatalf("the lease table's persistence after leasectl migrate: %q, %v; want u (UNLOGGED)", persistence, err)
	}
	store, err := leasepostgres.New(pool, leasepostgres.Options{Schema: "fast"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
}
