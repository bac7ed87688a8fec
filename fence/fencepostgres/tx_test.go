package fencepostgres_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/lease"
)

var isoLevels = []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable}

// readMark returns the fence of resource in the default table.
func readMark(t *testing.T, db *pgxpool.Pool, resource string) fence.Mark {
	t.Helper()
	var m fence.Mark
	err := db.QueryRow(t.Context(), `SELECT lease_key, token FROM public.lease_fences WHERE resource = $1`, resource).Scan(&m.Key, &m.Token)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return m
}

func TestTxRollsBackEverything(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE log (msg text)`); err != nil {
		t.Fatal(err)
	}
	count := func() (n int) {
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM log`).Scan(&n)
		return n
	}
	insert := func(tx pgx.Tx) error { _, err := tx.Exec(ctx, `INSERT INTO log VALUES ('x')`); return err }

	if err := fencepostgres.Tx(ctx, pool, snap("k", 10), []string{"a", "b"}, insert); err != nil {
		t.Fatal(err)
	}
	// b is stale for token 9: nothing of the transaction stays, a included,
	// and fn never runs.
	called := false
	err := fencepostgres.Tx(ctx, pool, snap("k", 9), []string{"c", "b"}, func(tx pgx.Tx) error { called = true; return nil })
	wantStale(t, err, 9, 10)
	if called || readMark(t, pool, "c") != (fence.Mark{}) {
		t.Fatalf("stale Tx ran fn (%v) or kept the fence of c (%v)", called, readMark(t, pool, "c"))
	}
	// fn fails: the fences do not move.
	boom := errors.New("boom")
	err = fencepostgres.Tx(ctx, pool, snap("k", 11), []string{"a"}, func(tx pgx.Tx) error { _ = insert(tx); return boom })
	if err != boom {
		t.Fatalf("Tx = %v; want fn's error as is", err)
	}
	if m := readMark(t, pool, "a"); m.Token != 10 || count() != 1 {
		t.Fatalf("after a failed fn: fence %v, %d log rows; want token 10 and 1 row", m, count())
	}
	// fn panics: rolled back, panic goes on.
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		_ = fencepostgres.Tx(ctx, pool, snap("k", 12), []string{"a"}, func(tx pgx.Tx) error { _ = insert(tx); panic("fn") })
	}()
	if m := readMark(t, pool, "a"); m.Token != 10 || count() != 1 {
		t.Fatalf("after a panic: fence %v, %d log rows; want token 10 and 1 row", m, count())
	}
}

func TestTxNestedUsesSavepoint(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	if err := fencepostgres.Claim(ctx, pool, snap("k", 5), "r"); err != nil {
		t.Fatal(err)
	}
	outer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Rollback(ctx)
	wantStale(t, fencepostgres.Tx(ctx, outer, snap("k", 4), []string{"r"}, nil), 4, 5)
	// The outer transaction survives the stale savepoint.
	if err := fencepostgres.Tx(ctx, outer, snap("k", 6), []string{"r"}, nil); err != nil {
		t.Fatalf("Tx in a savepoint after a stale one: %v", err)
	}
	if m := readMark(t, pool, "r"); m.Token != 5 {
		t.Fatalf("fence before the outer commit = %v; want token 5", m)
	}
	if err := outer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if m := readMark(t, pool, "r"); m.Token != 6 {
		t.Fatalf("fence after the outer commit = %v; want token 6", m)
	}
}

func TestTxTokenRange(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	top := lease.Token(math.MaxInt64)
	if err := fencepostgres.Claim(ctx, pool, snap("k", top), "r"); !errors.Is(err, fence.ErrImplausibleToken) {
		t.Fatalf("Claim with token 2^63−1 = %v; want ErrImplausibleToken", err)
	}
	if m := readMark(t, pool, "r"); !m.IsZero() {
		t.Fatalf("fence = %v after an implausible token; want none", m)
	}
	for _, tok := range []lease.Token{top + 1, math.MaxUint64} {
		err := fencepostgres.Claim(ctx, pool, snap("k", tok), "r")
		if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "bigint") {
			t.Fatalf("Claim with token %d = %v; want ErrInvalid naming bigint", tok, err)
		}
	}
}

func TestTxInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var nilPool *pgxpool.Pool
	for name, call := range map[string]func() error{
		"no resources":   func() error { return fencepostgres.Tx(ctx, nilPool, snap("k", 1), nil, nil) },
		"empty resource": func() error { return fencepostgres.Tx(ctx, nilPool, snap("k", 1), []string{""}, nil) },
		"NUL":            func() error { return fencepostgres.Tx(ctx, nilPool, snap("k", 1), []string{"a\x00"}, nil) },
		"bad UTF-8":      func() error { return fencepostgres.Tx(ctx, nilPool, snap("k", 1), []string{"a\xff"}, nil) },
		"no token":       func() error { return fencepostgres.Tx(ctx, nilPool, snap("k", 0), []string{"a"}, nil) },
		"no key":         func() error { return fencepostgres.Tx(ctx, nilPool, snap("", 1), []string{"a"}, nil) },
		"long": func() error {
			return fencepostgres.Tx(ctx, nilPool, snap("k", 1), []string{strings.Repeat("x", 1025)}, nil)
		},
	} {
		if err := call(); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", name, err)
		}
	}
	if err := fencepostgres.Tx(ctx, nil, snap("k", 1), []string{"a"}, nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("nil db: %v; want ErrInvalid", err)
	}
}

// TestTxOppositeOrders runs transactions over the same resources named in
// opposite orders, at every isolation level: none deadlocks, and at
// READ COMMITTED none even conflicts.
func TestTxOppositeOrders(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	resources := []string{"r1", "r2", "r3", "r4"}
	reversed := []string{"r4", "r3", "r2", "r1"}
	for _, iso := range isoLevels {
		t.Run(string(iso), func(t *testing.T) {
			ctx := ctxT(t)
			db := fencepostgres.WithTxOptions(pool, pgx.TxOptions{IsoLevel: iso})
			const workers, rounds = 8, 20
			var (
				wg        sync.WaitGroup
				mu        sync.Mutex
				conflicts int
				other     []error
			)
			for w := range workers {
				wg.Go(func() {
					rs := resources
					if w%2 == 1 {
						rs = reversed
					}
					for range rounds {
						// One lease, one token: every transaction is admitted.
						err := fencepostgres.Tx(ctx, db, snap("k", 1), rs, func(tx pgx.Tx) error {
							var level string
							if err := tx.QueryRow(ctx, "SHOW transaction_isolation").Scan(&level); err != nil {
								return err
							}
							if level != string(iso) {
								return fmt.Errorf("isolation %q; want %q", level, iso)
							}
							return nil
						})
						mu.Lock()
						switch {
						case err == nil:
						case isDeadlock(err):
							other = append(other, fmt.Errorf("deadlock: %w", err))
						case fence.IsRetryable(err) && errors.Is(err, fence.ErrConflict):
							conflicts++
						default:
							other = append(other, err)
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			for _, err := range other {
				t.Error(err)
			}
			var deadlocks int
			if err := pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocks); err != nil {
				t.Fatal(err)
			}
			if deadlocks != 0 {
				t.Errorf("%d deadlocks", deadlocks)
			}
			if iso == pgx.ReadCommitted && conflicts != 0 {
				t.Errorf("%d conflicts at READ COMMITTED", conflicts)
			}
			t.Logf("%s: %d of %d transactions conflicted (retryable)", iso, conflicts, workers*rounds)
		})
	}
}

// TestTxConcurrentStaleWriter: at every isolation level, a stale writer
// racing a newer one is refused or told to retry, never admitted after
// the newer one.
func TestTxConcurrentStaleWriter(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	for _, iso := range isoLevels {
		t.Run(string(iso), func(t *testing.T) {
			ctx := ctxT(t)
			db := fencepostgres.WithTxOptions(pool, pgx.TxOptions{IsoLevel: iso})
			res := "race/" + string(iso)
			if err := fencepostgres.Claim(ctx, db, snap("k", 1), res); err != nil {
				t.Fatal(err)
			}
			// The newer writer holds the fence row while the stale one
			// arrives; the stale one must wait and then be refused.
			newer, err := db.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			staleDone := make(chan error, 1)
			if err := fencepostgres.Tx(ctx, newer, snap("k", 3), []string{res}, func(pgx.Tx) error {
				go func() { staleDone <- fencepostgres.Tx(ctx, db, snap("k", 2), []string{res}, nil) }()
				waitForLockWaiter(t, pool)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := newer.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			err = <-staleDone
			switch {
			case errors.Is(err, fence.ErrStale):
			case iso != pgx.ReadCommitted && fence.IsRetryable(err):
				// Retrying sees the new fence and is refused.
				wantStale(t, fencepostgres.Tx(ctx, db, snap("k", 2), []string{res}, nil), 2, 3)
			default:
				t.Fatalf("stale writer: %v", err)
			}
			if m := readMark(t, pool, res); m.Token != 3 {
				t.Fatalf("fence = %v; want token 3", m)
			}
		})
	}
}

func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}

// waitForLockWaiter returns once a session of the database waits for a
// lock.
func waitForLockWaiter(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for {
		var n int
		err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		if err != nil {
			t.Error(err)
			return
		}
		if n > 0 {
			return
		}
		time.Sleep(time.Millisecond) // poll gently; no timing is asserted
	}
}

func TestTxSerializationFailureIsRetryable(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE acct (id int PRIMARY KEY, n int); INSERT INTO acct VALUES (1, 0), (2, 0)`); err != nil {
		t.Fatal(err)
	}
	db := fencepostgres.WithTxOptions(pool, pgx.TxOptions{IsoLevel: pgx.Serializable})
	// Classic write skew on the caller's own table, with two resources
	// fenced separately: one of the two must fail to serialize.
	ready, proceed := make(chan struct{}, 2), make(chan struct{})
	skew := func(res string, id int) error {
		return fencepostgres.Tx(ctx, db, snap("k", 1), []string{res}, func(tx pgx.Tx) error {
			var sum int
			if err := tx.QueryRow(ctx, `SELECT sum(n) FROM acct`).Scan(&sum); err != nil {
				return err
			}
			ready <- struct{}{}
			<-proceed
			_, err := tx.Exec(ctx, `UPDATE acct SET n = $1 WHERE id = $2`, sum+1, id)
			return err
		})
	}
	errs := make(chan error, 2)
	go func() { errs <- skew("s1", 1) }()
	go func() { errs <- skew("s2", 2) }()
	<-ready
	<-ready
	close(proceed)
	e1, e2 := <-errs, <-errs
	failed := e1
	if e1 == nil {
		failed = e2
	}
	if (e1 == nil) == (e2 == nil) {
		t.Fatalf("want exactly one failure: %v, %v", e1, e2)
	}
	if !fence.IsRetryable(failed) || !errors.Is(failed, fence.ErrConflict) || errors.Is(failed, fence.ErrStale) {
		t.Fatalf("serialization failure = %v; want ErrConflict, retryable", failed)
	}
	t.Log(failed)
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	o := fencepostgres.TableOptions{Schema: `Odd "schema"`, Table: `fences; DROP TABLE x`}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() { errs <- fencepostgres.Migrate(ctx, pool, o) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	table, err := fencepostgres.NewTable(o)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"Odd ""schema"""."fences; DROP TABLE x"`; table.Name() != want {
		t.Fatalf("Name() = %s; want %s", table.Name(), want)
	}
	if err := table.Claim(ctx, pool, snap("k", 2), "r"); err != nil {
		t.Fatal(err)
	}
	wantStale(t, table.Tx(ctx, pool, snap("k", 1), []string{"r"}, nil), 1, 2)
	var versions int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM "Odd ""schema"""."fences; DROP TABLE x_migrations"`).Scan(&versions); err != nil || versions != 2 {
		t.Fatalf("versions: %d, %v", versions, err)
	}

	// The default table is not the odd one.
	if m := readMark(t, pool, "r"); !m.IsZero() {
		t.Fatalf("default table has %v", m)
	}
	missing, _ := fencepostgres.NewTable(fencepostgres.TableOptions{Table: "nowhere"})
	err = missing.Claim(ctx, pool, snap("k", 1), "r")
	if err == nil || !strings.Contains(err.Error(), "fencepostgres.Migrate") || !strings.Contains(err.Error(), "leasectl migrate") ||
		!errors.Is(err, lease.ErrMisconfigured) {
		t.Fatalf("Claim on a missing table = %v; want lease.ErrMisconfigured, advising leasectl migrate and fencepostgres.Migrate", err)
	}
	if _, err := fencepostgres.NewTable(fencepostgres.TableOptions{Table: strings.Repeat("t", 53)}); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("NewTable with a long name = %v; want ErrInvalid", err)
	}
}

// TestTxSameTokenLocksWithoutWriting: a holder writing again under its own
// token takes the fence row's lock but writes no new row version.
func TestTxSameTokenLocksWithoutWriting(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	if err := fencepostgres.Claim(ctx, pool, snap("k", 5), "r"); err != nil {
		t.Fatal(err)
	}
	xmin := func() (x string) {
		if err := pool.QueryRow(ctx, `SELECT xmin::text FROM public.lease_fences WHERE resource = 'r'`).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	before := xmin()
	err := fencepostgres.Tx(ctx, pool, snap("k", 5), []string{"r"}, func(pgx.Tx) error {
		_, err := pool.Exec(ctx, `SELECT 1 FROM public.lease_fences WHERE resource = 'r' FOR UPDATE NOWAIT`)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
			return fmt.Errorf("another session locking the fence row: %v; want lock_not_available", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if after := xmin(); after != before {
		t.Fatalf("the same token wrote a new row version (xmin %s → %s)", before, after)
	}
	if err := fencepostgres.Claim(ctx, pool, snap("k", 6), "r"); err != nil || xmin() == before {
		t.Fatalf("a higher token: %v, xmin %s; want a new row version", err, xmin())
	}
}

// TestTxSwallowedStatementError: fn swallows a failed statement; the
// COMMIT rolls back, and Tx says nothing was written rather than that the
// outcome is unknown.
func TestTxSwallowedStatementError(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	err := fencepostgres.Tx(ctx, pool, snap("k", 1), []string{"r"}, func(tx pgx.Tx) error {
		_, _ = tx.Exec(ctx, `SELECT 1/0`)
		return nil
	})
	if err == nil || errors.Is(err, lease.ErrIndeterminate) || !strings.Contains(err.Error(), "nothing written") {
		t.Fatalf("Tx = %v; want rolled back, nothing written", err)
	}
	if m := readMark(t, pool, "r"); !m.IsZero() {
		t.Fatalf("fence = %v after a rolled-back commit", m)
	}
}

// TestCommitErrorSeverity: a COMMIT that ends the session is indeterminate
// even when the server translates its severity (lc_messages); other server
// errors mean nothing was written.
func TestCommitErrorSeverity(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		err           *pgconn.PgError
		indeterminate bool
	}{
		{"FATAL", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true},
		{"translated FATAL", &pgconn.PgError{Severity: "ВАЖНО", SeverityUnlocalized: "FATAL", Code: "57P01"}, true},
		{"translated PANIC", &pgconn.PgError{Severity: "ПАНИКА", SeverityUnlocalized: "PANIC", Code: "XX000"}, true},
		{"ERROR", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "23505"}, false},
	} {
		err := fencepostgres.CommitError([]string{"r"}, c.err)
		if got := errors.Is(err, lease.ErrIndeterminate); got != c.indeterminate {
			t.Errorf("%s: %v; indeterminate = %v, want %v", c.name, err, got, c.indeterminate)
		}
	}
}
