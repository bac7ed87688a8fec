package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// problems returns Diagnose's problems as one string.
func problems(r leasepostgres.CheckReport) string {
	if err := r.Err(); err != nil {
		return err.Error()
	}
	return ""
}

func TestCheckHealthy(t *testing.T) {
	t.Parallel()
	s, _ := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check on a migrated table: %v", err)
	}
	r := s.Diagnose(ctx)
	if !strings.Contains(strings.Join(r.Advice, "\n"), "idle_in_transaction_session_timeout is 0") {
		t.Fatalf("Diagnose advice = %q, want advice on idle_in_transaction_session_timeout (0 by default)", r.Advice)
	}
}

func TestCheckTable(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	url := newDatabase(t)
	pool := newPool(t, url, nil)
	s, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if p := problems(s.Diagnose(ctx)); !strings.Contains(p, "not found") || !strings.Contains(p, "Migrate") {
		t.Fatalf("Diagnose without a table: %q, want the table reported missing", p)
	}
	other, err := leasepostgres.New(pool, leasepostgres.Options{Schema: "nowhere"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if p := problems(other.Diagnose(ctx)); !strings.Contains(p, `schema "nowhere" does not exist`) {
		t.Fatalf("Diagnose without a schema: %q", p)
	}
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check after Migrate: %v", err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM public.leases_migrations`); err != nil {
		t.Fatal(err)
	}
	if p := problems(s.Diagnose(ctx)); !strings.Contains(p, "at migration 0") {
		t.Fatalf("Diagnose with no recorded migration: %q, want it reported behind", p)
	}
	if _, err := pool.Exec(ctx, `DROP TABLE public.leases_migrations; ALTER TABLE public.leases DROP COLUMN watched_until`); err != nil {
		t.Fatal(err)
	}
	if p := problems(s.Diagnose(ctx)); !strings.Contains(p, "lacks columns watched_until") {
		t.Fatalf("Diagnose with a column missing: %q, want the column named", p)
	}
}

// TestCheckPrivileges connects as roles lacking privileges on the table.
func TestCheckPrivileges(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	url := newDatabase(t)
	admin := newPool(t, url, nil)
	if err := leasepostgres.Migrate(ctx, admin, leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	role := fmt.Sprintf("lease_check_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN; REVOKE ALL ON public.leases FROM PUBLIC`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role)
	})
	pool := newPool(t, url, func(c *pgxpool.Config) { c.ConnConfig.User = role })
	s, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if p := problems(s.Diagnose(ctx)); !strings.Contains(p, "lacks SELECT, INSERT, UPDATE on lease table") {
		t.Fatalf("Diagnose as a role without privileges: %q", p)
	}
	if _, err := admin.Exec(ctx, `GRANT SELECT ON public.leases TO `+role); err != nil {
		t.Fatal(err)
	}
	p := problems(s.Diagnose(ctx))
	if !strings.Contains(p, "lacks INSERT, UPDATE on lease table") || strings.Contains(p, "lacks SELECT") {
		t.Fatalf("Diagnose as a role with SELECT only: %q", p)
	}
	if _, err := admin.Exec(ctx, `GRANT INSERT, UPDATE ON public.leases TO `+role); err != nil {
		t.Fatal(err)
	}
	p = problems(s.Diagnose(ctx))
	if !strings.Contains(p, "lacks DELETE on lease table") || !strings.Contains(p, "never removed") || strings.Contains(p, "lacks INSERT") {
		t.Fatalf("Diagnose as a role without DELETE: %q", p)
	}
	forever, err := leasepostgres.New(pool, leasepostgres.Options{Retention: lease.KeepForever})
	if err != nil {
		t.Fatal(err)
	}
	defer forever.Close()
	if err := forever.Check(ctx); err != nil {
		t.Fatalf("Check without DELETE, keeping rows forever: %v", err)
	}
	if _, err := admin.Exec(ctx, `GRANT DELETE ON public.leases TO `+role); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check with the documented grants: %v", err)
	}
	if _, err := admin.Exec(ctx, `REVOKE USAGE ON SCHEMA public FROM PUBLIC`); err != nil {
		t.Fatal(err)
	}
	if p := problems(s.Diagnose(ctx)); !strings.Contains(p, `lacks USAGE on schema "public"`) {
		t.Fatalf("Diagnose without USAGE on the schema: %q", p)
	}
}

// TestCheckPooler runs Diagnose through a real PgBouncer in each pool
// mode. It needs the pgbouncer binary (Debian package pgbouncer); without
// it the test is skipped, or fails under LEASE_REQUIRE_SERVERS=1.
func TestCheckPooler(t *testing.T) {
	t.Parallel()
	url := newDatabase(t)
	ctx := ctxT(t)
	direct := newPool(t, url, nil)
	if err := leasepostgres.Migrate(ctx, direct, leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode    string
		size    int
		o       leasepostgres.Options
		problem bool
		advice  string
	}{
		{mode: "session", size: 4},
		{mode: "transaction", size: 4, problem: true},
		{mode: "transaction", size: 1, problem: true},
		{mode: "statement", size: 4, problem: true},
		{mode: "transaction", size: 4, o: leasepostgres.Options{DisableNotify: true}, advice: "release notifications are off"},
		{mode: "transaction", size: 4, o: leasepostgres.Options{ListenPool: direct}, advice: "default exec mode (named prepared statements) behind a transaction-mode pooler"},
	} {
		t.Run(fmt.Sprintf("%s-%d-%v-%v", tc.mode, tc.size, tc.o.DisableNotify, tc.o.ListenPool != nil), func(t *testing.T) {
			bouncer := testserver.PgBouncer(t, url, tc.mode, tc.size)
			pool := newPool(t, bouncer, func(c *pgxpool.Config) {
				c.MaxConns = 4
				// The exec mode stays pgx's default, which Diagnose
				// advises on, but without a statement cache: PgBouncer
				// 1.18 keeps no prepared statements across transactions.
				c.ConnConfig.StatementCacheCapacity = 0
			})
			s, err := leasepostgres.New(pool, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			r := s.Diagnose(ctx)
			p := problems(r)
			t.Logf("problems: %q; advice: %q", p, r.Advice)
			if got := strings.Contains(p, "connection pooler in transaction or statement mode"); got != tc.problem {
				t.Fatalf("pool_mode %s: Diagnose problems %q, want a pooler problem: %v", tc.mode, p, tc.problem)
			}
			if tc.advice != "" && !strings.Contains(strings.Join(r.Advice, "\n"), tc.advice) {
				t.Fatalf("Diagnose advice %q, want %q", r.Advice, tc.advice)
			}
		})
	}
}
