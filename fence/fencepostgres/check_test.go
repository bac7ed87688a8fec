package fencepostgres_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/lease"
)

// TestCheck: Check reports a table that is missing, behind its migrations
// or short of a privilege, saying what to run or grant, and nothing once
// all is in place.
func TestCheck(t *testing.T) {
	t.Parallel()
	pool := newPool(t) // the default table, migrated
	ctx := ctxT(t)
	table, err := fencepostgres.NewTable(fencepostgres.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Check(ctx, pool); err != nil {
		t.Fatalf("Check on a migrated table: %v", err)
	}
	missing, _ := fencepostgres.NewTable(fencepostgres.TableOptions{Table: "nowhere"})
	if err := missing.Check(ctx, pool); err == nil || !strings.Contains(err.Error(), `fences table "public"."nowhere" not found`) ||
		!strings.Contains(err.Error(), "run `leasectl migrate`, or fencepostgres.Migrate") {
		t.Fatalf("Check of a missing table = %v; want it named, with leasectl migrate advised", err)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM public.lease_fences_migrations WHERE version = (SELECT max(version) FROM public.lease_fences_migrations)"); err != nil {
		t.Fatal(err)
	}
	if err := table.Check(ctx, pool); err == nil || !strings.Contains(err.Error(), "pending") {
		t.Fatalf("Check with a migration missing = %v; want it pending", err)
	}
	if err := fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{}); err != nil {
		t.Fatal(err)
	}

	role := "fence_check_" + strings.ToLower(rand.Text()[:8])
	if _, err := pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN; GRANT SELECT, INSERT, UPDATE ON public.lease_fences TO "+role+"; GRANT SELECT ON public.lease_fences_floors TO "+role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role) })
	cc := pool.Config().ConnConfig
	u := &url.URL{Scheme: "postgres", User: url.User(role), Host: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), Path: "/" + cc.Database, RawQuery: "sslmode=disable"}
	limited, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	err = table.Check(ctx, limited)
	if err == nil || !strings.Contains(err.Error(), `lacks DELETE on fences table`) || !strings.Contains(err.Error(), `lacks INSERT, UPDATE on floors table`) {
		t.Fatalf("Check as a role without DELETE on the fences, INSERT and UPDATE on the floors = %v", err)
	}
	forever, _ := fencepostgres.NewTable(fencepostgres.TableOptions{Retention: lease.KeepForever})
	if err := forever.Check(ctx, limited); err == nil || strings.Contains(err.Error(), "DELETE") || strings.Contains(err.Error(), "UPDATE on floors") {
		t.Fatalf("Check of a table that never retires = %v; want INSERT on the floors alone missing", err)
	}
	if err := fencepostgres.Claim(ctx, limited, snap("k", 1), "r"); !errors.Is(err, lease.ErrMisconfigured) {
		t.Fatalf("Claim as that role = %v; want the lease.ErrMisconfigured that Check warned of", err)
	}
	if _, err := pool.Exec(ctx, "GRANT INSERT, UPDATE ON public.lease_fences_floors TO "+role+"; GRANT DELETE ON public.lease_fences TO "+role); err != nil {
		t.Fatal(err)
	}
	if err := table.Check(ctx, limited); err != nil {
		t.Fatalf("Check with the documented grants: %v", err)
	}
	if err := fencepostgres.Claim(ctx, limited, snap("k", 1), "r"); err != nil {
		t.Fatalf("Claim with the documented grants: %v", err)
	}
}
