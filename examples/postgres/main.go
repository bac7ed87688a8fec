// Command postgres is the PostgreSQL quickstart (docs/postgres-quickstart.md)
// as a program: it connects to a database, creates the lease, fences and
// reports tables, acquires a lease, writes a report under the lease's fence,
// publishes it with a guarded write, and shuts down cleanly.
//
//	DATABASE_URL=postgres://user@localhost:5432/app go run .
//
// With PGBOUNCER=transaction it uses the settings that a connection pooler
// in transaction mode needs.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/lease"
)

func main() {
	url := os.Getenv("DATABASE_URL") // postgres://user@localhost:5432/app
	if url == "" {
		fmt.Fprintln(os.Stderr, "quickstart: set DATABASE_URL")
		os.Exit(2)
	}
	pgbouncer := os.Getenv("PGBOUNCER") == "transaction"

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, url, pgbouncer, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run connects to the database url, creates the tables, and writes the
// daily report under a lease.
func run(ctx context.Context, url string, pgbouncer bool, out io.Writer) error {
	poolConfig, err := pgxpool.ParseConfig(url)
	if err != nil {
		return errors.New("DATABASE_URL is not a valid PostgreSQL URL") // pgx's error would repeat the URL
	}
	if pgbouncer {
		// PgBouncer in transaction mode: no named prepared statements.
		poolConfig.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return err
	}
	defer pool.Close() // last: the lease store never closes the pool

	// Create or upgrade the lease table and the fences table; safe when
	// replicas start together.
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		return err
	}
	if err := fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{}); err != nil {
		return err
	}
	// The application's own table.
	if _, err := pool.Exec(ctx, reportsTable); err != nil {
		return err
	}

	store, err := leasepostgres.New(pool, leasepostgres.Options{
		// Behind PgBouncer, LISTEN needs a direct pool (Options.ListenPool);
		// without one, waiters poll.
		DisableNotify: pgbouncer,
	})
	if err != nil {
		return err
	}
	defer store.Close() // stops the release listener, if one started
	return dailyReport(ctx, pool, store, out)
}

// reportsTable is the application's table: it has nothing to do with
// leases, and needs no column for them.
const reportsTable = `CREATE TABLE IF NOT EXISTS reports (
    name      text    PRIMARY KEY,
    body      text    NOT NULL,
    published boolean NOT NULL DEFAULT false
)`

// dailyReport writes and publishes the daily report under the lease
// "reports/daily", so that one replica at a time does it.
func dailyReport(ctx context.Context, pool *pgxpool.Pool, store *leasepostgres.Store, out io.Writer) error {
	hostname, _ := os.Hostname()
	leases, err := lease.NewClient(store, lease.ClientOptions{Owner: "report-writer/" + hostname})
	if err != nil {
		return err
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{
		TTL:  10 * time.Second,
		Wait: 30 * time.Second, // wait at most this long while another replica holds it
	})
	if err != nil {
		return err
	}
	h, err := leases.Acquire(ctx, "reports/daily", policy)
	if errors.Is(err, lease.ErrNotAcquired) {
		fmt.Fprintln(out, "another replica is writing the report:", err)
		return nil
	} else if err != nil {
		return err
	}
	defer h.Release(context.WithoutCancel(ctx)) // runs last: free the key at once
	m, err := h.StartManaged(ctx)               // renew every TTL/3 in the background
	if err != nil {
		return err // the lease was already lost, or ctx ended
	}
	defer m.Stop(context.WithoutCancel(ctx)) // runs first: stop renewing
	fmt.Fprintf(out, "acquired %q with token %d\n", h.Key(), h.Token())

	// Work under m.Context(): it is cancelled the moment the lease is lost.
	if err := writeReport(m.Context(), pool, h.Snapshot(), "report body"); err != nil {
		return err
	}
	fmt.Fprintln(out, "wrote the report under token", h.Token())
	if err := publishReport(m.Context(), pool, store, h.Snapshot()); err != nil {
		return err
	}
	fmt.Fprintln(out, "published the report under the lease")
	return shutdown(ctx, h, m, out)
}

// writeReport writes the report in a transaction fenced by snap: it
// commits only if no holder with a newer token of "reports/daily" has
// written the resource "reports/daily" before, for example after this
// process was paused past its lease.
func writeReport(ctx context.Context, pool *pgxpool.Pool, snap lease.Snapshot, body string) error {
	err := fencepostgres.Tx(ctx, pool, snap, []string{"reports/daily"}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO reports (name, body) VALUES ('daily', $1)
			ON CONFLICT (name) DO UPDATE SET body = excluded.body`, body)
		return err
	})
	if errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("a newer holder already wrote the report: %w", err)
	}
	return err
}

// publishReport marks the report published, only while this acquisition
// still holds the lease.
func publishReport(ctx context.Context, pool *pgxpool.Pool, store *leasepostgres.Store, snap lease.Snapshot) error {
	g, err := store.Guard(snap)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Locks the lease row FOR SHARE: nobody can take the lease over
		// until this transaction ends.
		if err := leasepostgres.CheckGuard(ctx, tx, g); err != nil {
			return err // a *guard.NotCurrentError if the lease moved on
		}
		_, err := tx.Exec(ctx, `UPDATE reports SET published = true WHERE name = 'daily'`)
		return err
	})
}

// shutdown stops renewing the lease, which says whether it held while the
// work ran, then releases it, so that the next replica can start at once.
func shutdown(ctx context.Context, h *lease.Handle, m *lease.Managed, out io.Writer) error {
	if err := m.Stop(context.WithoutCancel(ctx)); err != nil {
		// The deferred Release still frees the key if the backend holds it.
		return fmt.Errorf("the lease was lost while writing: %w", err)
	}
	// Release now rather than in the deferred call, to see the outcome.
	if err := h.Release(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("release: %w", err) // the lease ends by itself when its TTL passes
	}
	fmt.Fprintln(out, "released; shutting down")
	return nil
}
