package docstest

import (
	"context"
	"os"
	"testing"
	"time"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// TestReadmeShapeRuns runs the README's code against a real database: the
// invoices are billed under the fence, and a stale holder's run changes
// nothing.
func TestReadmeShapeRuns(t *testing.T) {
	// Bounded, so that a stuck server fails this test instead of hanging
	// the package until go test's timeout.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, testserver.Postgres(t).NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE invoices (id int PRIMARY KEY, month text, status text);
		INSERT INTO invoices VALUES (1, '2026-11', 'open'), (2, '2026-10', 'open')`); err != nil {
		t.Fatal(err)
	}
	if err := nightlyBilling(ctx, pool, "host-1"); err != nil {
		t.Fatalf("nightlyBilling: %v", err)
	}
	var billed, open int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'billed'), count(*) FILTER (WHERE status = 'open') FROM invoices`).Scan(&billed, &open); err != nil {
		t.Fatal(err)
	}
	if billed != 1 || open != 1 {
		t.Fatalf("billed %d, open %d; want the November invoice billed and October's open", billed, open)
	}
	var fenced int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM lease_fences WHERE resource = 'invoices/2026-11'`).Scan(&fenced); err != nil {
		t.Fatal(err)
	}
	if fenced != 1 {
		t.Fatalf("%d fence rows for invoices/2026-11, want 1", fenced)
	}
}
