// Command postgres is the PostgreSQL quickstart (docs/postgres-quickstart.md)
// as a program: it connects to a database, creates the lease table, acquires
// a lease, makes a fenced write and a guarded write with it, and shuts down
// cleanly.
//
//	go run ./examples/postgres -url postgres://user@localhost:5432/app
//
// The URL can also come from DATABASE_URL. With -pgbouncer it uses the pgx
// settings that a connection pooler in transaction mode needs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/lease"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.url, "url", os.Getenv("DATABASE_URL"), "PostgreSQL URL; default $DATABASE_URL")
	flag.BoolVar(&cfg.pgbouncer, "pgbouncer", false, "connect through PgBouncer in transaction mode")
	flag.Parse()
	if cfg.url == "" {
		fmt.Fprintln(os.Stderr, "postgres example: pass -url or set DATABASE_URL")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "postgres example:", err)
		os.Exit(1)
	}
}

type config struct {
	url       string
	pgbouncer bool
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	// docs:begin connect
	poolConfig, err := pgxpool.ParseConfig(cfg.url)
	if err != nil {
		return err
	}
	if cfg.pgbouncer {
		// PgBouncer in transaction mode: no named prepared statements.
		poolConfig.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return err
	}
	defer pool.Close() // last: the lease store never closes the pool

	// Create or upgrade the lease table; safe when replicas start together.
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		return err
	}
	store, err := leasepostgres.New(pool, leasepostgres.Options{
		// Behind PgBouncer, LISTEN needs a direct pool (Options.ListenPool);
		// without one, waiters poll.
		DisableNotify: cfg.pgbouncer,
	})
	if err != nil {
		return err
	}
	defer store.Close() // stops the release listener, if one started
	// docs:end connect

	if err := createReports(ctx, pool); err != nil {
		return err
	}

	// docs:begin acquire
	hostname, _ := os.Hostname()
	leases, err := lease.NewClient(store, lease.ClientOptions{Owner: "report-writer/" + hostname})
	if err != nil {
		return err
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{
		TTL:  10 * time.Second,
		Wait: 30 * time.Second, // keep trying while another replica holds it
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
	m, err := h.StartManaged(ctx) // renew every TTL/3 in the background
	if err != nil {
		return err
	}
	defer m.Stop(context.WithoutCancel(ctx))    // runs second: stop renewing
	defer h.Release(context.WithoutCancel(ctx)) // runs first: free the key at once
	fmt.Fprintf(out, "acquired %q with token %d\n", h.Key(), h.Token())
	// docs:end acquire

	// docs:begin write
	// Work under m.Context(): it is cancelled the moment the lease is lost.
	ok, err := fencedWrite(m.Context(), pool, "daily", h.Token(), "report body")
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("a newer holder already wrote the report; token %d is stale", h.Token())
	}
	fmt.Fprintln(out, "wrote the report under token", h.Token())
	// docs:end write

	// docs:begin guard
	// A guarded write: only while this acquisition still holds the lease.
	g, err := store.Guard(h.Snapshot())
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(m.Context(), pool, func(tx pgx.Tx) error {
		// Locks the lease row FOR SHARE: nobody can take the lease over
		// until this transaction ends.
		if err := leasepostgres.CheckGuard(m.Context(), tx, g); err != nil {
			return err // a *guard.NotCurrentError if the lease moved on
		}
		_, err := tx.Exec(m.Context(), `UPDATE reports SET published = true WHERE name = $1`, "daily")
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "published the report under the lease")
	// docs:end guard

	// docs:begin shutdown
	// Release now rather than in the deferred call, to see the outcome.
	if err := h.Release(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("release: %w", err) // the lease ends by itself when its TTL passes
	}
	if err := m.Stop(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("the lease was lost while writing: %w", err)
	}
	fmt.Fprintln(out, "released; shutting down")
	return nil
	// docs:end shutdown
}

// docs:begin table
// reportsTable holds what the example writes. fence is the highest lease
// token that wrote a row.
const reportsTable = `CREATE TABLE IF NOT EXISTS reports (
    name      text    PRIMARY KEY,
    body      text    NOT NULL,
    published boolean NOT NULL DEFAULT false,
    fence     bigint  NOT NULL
)`

// docs:end table

// createReports creates the table the example writes to.
func createReports(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, reportsTable)
	return err
}

// docs:begin fence
// fencedWrite writes the report under the lease token tok, and reports
// whether the write was accepted: it is refused if a holder with a higher
// token wrote the row before, for example after this process was paused
// past its lease. The comparison and the write are one statement, so they
// cannot be separated by another writer.
func fencedWrite(ctx context.Context, db *pgxpool.Pool, name string, tok lease.Token, body string) (bool, error) {
	tag, err := db.Exec(ctx, `
INSERT INTO reports AS r (name, body, fence) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET body = excluded.body, fence = excluded.fence
WHERE r.fence <= excluded.fence`, name, body, int64(tok))
	return tag.RowsAffected() == 1, err
}

// docs:end fence
