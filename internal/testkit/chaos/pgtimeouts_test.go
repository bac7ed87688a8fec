package chaos_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/lease"
)

// pgSession returns a pool of one connection to dbURL whose sessions run
// with the given settings ("name=value"), and its lease client.
func pgSession(t *testing.T, dbURL, owner string, settings map[string]string) (*pgxpool.Pool, *leasepostgres.Store, *lease.Client) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["application_name"] = owner
	for k, v := range settings {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	c, err := lease.NewClient(store, lease.ClientOptions{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	return pool, store, c
}

// TestIdleInTransactionTimeout measures what
// idle_in_transaction_session_timeout buys when a holder stops (a pause, a
// hung process) inside a guard transaction, holding its lease record FOR
// SHARE: without it nobody can acquire the lease while the transaction
// stays open, however long; with it the server ends the stopped session
// after the timeout, and the next client acquires the lease at once
// (the lease has expired by then). docs/fencing.md quotes the figures.
func TestIdleInTransactionTimeout(t *testing.T) {
	t.Parallel()
	for _, timeout := range []string{"", "2s"} {
		name := "unset"
		if timeout != "" {
			name = timeout
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dbURL := postgresDB(t)
			ctx := ctxT(t)
			settings := map[string]string{}
			if timeout != "" {
				settings["idle_in_transaction_session_timeout"] = timeout
			}
			poolA, storeA, a := pgSession(t, dbURL, "stopped-holder", settings)
			_, _, b := pgSession(t, dbURL, "next-holder", nil)
			p := rowPolicy(t)
			h, err := a.Acquire(ctx, "k1", p)
			if err != nil {
				t.Fatal(err)
			}
			g, err := storeA.Guard(h.Snapshot())
			if err != nil {
				t.Fatal(err)
			}
			tx, err := poolA.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			if err := leasepostgres.CheckGuard(ctx, tx, g); err != nil {
				t.Fatal(err)
			}
			if err := fencepostgres.Tx(ctx, tx, h.Snapshot(), []string{"res-k1"}, nil); err != nil {
				t.Fatal(err)
			}
			stopped := time.Now() // the holder sends nothing from here on
			limit := 5 * ttl
			var got *lease.Handle
			for time.Since(stopped) < limit {
				if got, err = b.TryAcquire(ctx, "k1", p); err == nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if got == nil {
				t.Logf("idle_in_transaction_session_timeout %s: the next client did not get the lease (TTL %v) within %v of the holder stopping inside its guard transaction: %v",
					name, ttl, limit, err)
				if timeout != "" {
					t.Fatal("the timeout did not free the lease")
				}
				return
			}
			t.Logf("idle_in_transaction_session_timeout %s: the next client got the lease (TTL %v) %v after the holder stopped inside its guard transaction",
				name, ttl, time.Since(stopped).Round(10*time.Millisecond))
			if timeout == "" {
				t.Fatal("the lease was acquired while its holder's guard transaction was open")
			}
			if err := fencepostgres.Claim(ctx, poolA, got.Snapshot(), "res-k1"); err != nil {
				t.Fatalf("the next holder's fenced write: %v", err)
			}
		})
	}
}

// TestLockTimeout measures what lock_timeout changes for the next holder
// when the previous one stopped inside its fencepostgres.Tx, holding the fence's
// row lock: without it the next holder's fenced write waits for the lock
// until its context's deadline and fails with the context's error; with
// it the server ends the wait itself after lock_timeout, the write fails
// with SQLSTATE 55P03 (lock_not_available), nothing written, whatever the
// context. Either way no server process of the next holder is left
// waiting for the lock afterwards. docs/fencing.md quotes the figures.
func TestLockTimeout(t *testing.T) {
	for _, lt := range []string{"", "100ms"} {
		name := "unset"
		if lt != "" {
			name = lt
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dbURL := postgresDB(t)
			ctx := ctxT(t)
			poolA, _, a := pgSession(t, dbURL, "stopped-holder", nil)
			settings := map[string]string{}
			if lt != "" {
				settings["lock_timeout"] = lt
			}
			poolB, _, b := pgSession(t, dbURL, "next-holder", settings)
			admin, err := chaos.Pool(ctx, dbURL, "chaos-admin", 1)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			p := rowPolicy(t)
			h, err := a.Acquire(ctx, "k1", p)
			if err != nil {
				t.Fatal(err)
			}
			tx, err := poolA.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			if err := fencepostgres.Tx(ctx, tx, h.Snapshot(), []string{"res-k1"}, func(pgx.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			var next *lease.Handle
			for next == nil {
				next, _ = b.TryAcquire(ctx, "k1", p) // once the stopped holder's lease expired
				time.Sleep(50 * time.Millisecond)
			}
			wctx, cancel := context.WithTimeout(ctx, 2*p.Options().OperationTimeout)
			start := time.Now()
			err = fencepostgres.Claim(wctx, poolB, next.Snapshot(), "res-k1")
			took := time.Since(start)
			cancel()
			time.Sleep(100 * time.Millisecond)
			var waiting int
			if qerr := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
				AND application_name = 'next-holder' AND wait_event_type = 'Lock'`).Scan(&waiting); qerr != nil {
				t.Fatal(qerr)
			}
			var pgErr *pgconn.PgError
			code := ""
			if errors.As(err, &pgErr) {
				code = pgErr.Code
			}
			t.Logf("lock_timeout %s: the next holder's fenced write returned after %v (context %v) with %v (SQLSTATE %q); %d of its server processes still wait for the lock",
				name, took.Round(time.Millisecond), 2*p.Options().OperationTimeout, err, code, waiting)
			if err == nil {
				t.Fatal("a fenced write went through while another transaction held the fence's row lock")
			}
			if took > 2*p.Options().OperationTimeout+waitSlack {
				t.Errorf("the fenced write waited %v, past its context's deadline", took)
			}
			if lt != "" && waiting != 0 {
				t.Errorf("with lock_timeout %s, %d server processes still wait", lt, waiting)
			}
		})
	}
}
