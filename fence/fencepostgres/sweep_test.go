package fencepostgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// age makes the fences of resources look as if they last advanced two
// hours ago, past the retention of the tables of these tests.
func age(t *testing.T, pool *pgxpool.Pool, resources ...string) {
	t.Helper()
	tag, err := pool.Exec(t.Context(), `UPDATE public.lease_fences SET updated_at = now() - interval '2 hours' WHERE resource = ANY($1)`, resources)
	if err != nil || tag.RowsAffected() != int64(len(resources)) {
		t.Fatalf("aging %q: %v, %d rows", resources, err, tag.RowsAffected())
	}
}

// hourTable is the default fences table with a retention of an hour.
func hourTable(t *testing.T) *fencepostgres.Table {
	t.Helper()
	table, err := fencepostgres.NewTable(fencepostgres.TableOptions{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// raceTable returns a table like hourTable's whose retirement waits up
// to a minute for its locks: retireRace holds the floor row the
// retirement needs while it lines up the stale writer, which on a loaded
// machine takes longer than the default RetireLockTimeout of 100 ms (the
// retirement then gave up, and the race never lined up).
func raceTable(t *testing.T) *fencepostgres.Table {
	t.Helper()
	table, err := fencepostgres.NewTable(fencepostgres.TableOptions{Retention: time.Hour, RetireLockTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// readFloor returns the floor of lease key in the default table, 0 if it
// has none.
func readFloor(t *testing.T, pool *pgxpool.Pool, key string) lease.Token {
	t.Helper()
	var f int64
	err := pool.QueryRow(t.Context(), `SELECT token FROM public.lease_fences_floors WHERE lease_key = $1`, key).Scan(&f)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return lease.Token(f)
}

// wantFloor fails t unless err is a refusal by the floor current of a
// write with token.
func wantFloor(t *testing.T, err error, token, current lease.Token) {
	t.Helper()
	var se *fence.StaleError
	if !errors.As(err, &se) || !se.Floor || se.Token != token || se.Current != current {
		t.Fatalf("err = %v; want a refusal of token %d by the floor %d", err, token, current)
	}
}

// TestTableRetire: fences past the retention retire, raising the floor of
// their lease key; the floor then refuses the lease's stale writers on the
// retired resources and on fresh ones, at every isolation level, and
// admits the current holder; a retired resource can be fenced by another
// lease key.
func TestTableRetire(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	table := hourTable(t)
	claim := func(key string, tok lease.Token, rs ...string) {
		t.Helper()
		if err := fencepostgres.Claim(ctx, pool, snap(key, tok), rs...); err != nil {
			t.Fatal(err)
		}
	}
	claim("k", 5, "r1")
	claim("k", 7, "r2")
	claim("other", 3, "r3")
	claim("k", 9, "young") // advanced now: not due
	age(t, pool, "r1", "r2", "r3")

	sweeper := table.Sweeper(pool)
	if due := walk(t, sweeper, 2, true); !slices.Equal(due, []string{"r1", "r2", "r3"}) {
		t.Fatalf("dry run lists %q; want r1, r2, r3", due)
	}
	if m := readMark(t, pool, "r1"); m.Token != 5 || readFloor(t, pool, "k") != 0 {
		t.Fatalf("after the dry run: fence %v, floor %d; want both unchanged", m, readFloor(t, pool, "k"))
	}
	if removed := walk(t, sweeper, 2, false); !slices.Equal(removed, []string{"r1", "r2", "r3"}) {
		t.Fatalf("Sweep removed %q; want r1, r2, r3", removed)
	}
	for _, r := range []string{"r1", "r2", "r3"} {
		if m := readMark(t, pool, r); !m.IsZero() {
			t.Fatalf("fence of %s = %v after retirement", r, m)
		}
	}
	if readFloor(t, pool, "k") != 7 || readFloor(t, pool, "other") != 3 || readMark(t, pool, "young").Token != 9 {
		t.Fatalf("floors k %d, other %d, young %v; want 7, 3 and the young fence kept",
			readFloor(t, pool, "k"), readFloor(t, pool, "other"), readMark(t, pool, "young"))
	}
	if again := walk(t, sweeper, 10, false); len(again) != 0 {
		t.Fatalf("a second sweep removed %q", again)
	}

	for _, iso := range isoLevels {
		t.Run(string(iso), func(t *testing.T) {
			db := fencepostgres.WithTxOptions(pool, pgx.TxOptions{IsoLevel: iso})
			// Stale on the retired resource, on a fresh one, and on a
			// resource fenced by the same lease at a lower token.
			wantFloor(t, fencepostgres.Tx(ctx, db, snap("k", 6), []string{"r1"}, nil), 6, 7)
			wantFloor(t, fencepostgres.Tx(ctx, db, snap("k", 6), []string{"fresh/" + string(iso)}, nil), 6, 7)
			wantFloor(t, fencepostgres.Tx(ctx, db, snap("other", 2), []string{"r3", "zzz"}, nil), 2, 3)
			if m := readMark(t, pool, "fresh/"+string(iso)); !m.IsZero() {
				t.Fatalf("a refused write left a fence: %v", m)
			}
		})
	}
	// The holder of token 7 is not superseded: it is admitted everywhere.
	claim("k", 7, "r1", "r2", "fresh")
	if m := readMark(t, pool, "r2"); m.Token != 7 {
		t.Fatalf("fence of r2 = %v; want token 7 again", m)
	}
	claim("k", 8, "r1")
	// A retired resource can be fenced by another lease key, which then
	// owns it.
	claim("other", 4, "r3")
	claim("third", 1, "r3-next")
	err := fencepostgres.Claim(ctx, pool, snap("k", 9), "r3")
	var fe *fence.ForeignLeaseError
	if !errors.As(err, &fe) || fe.FencedBy != "other" {
		t.Fatalf("Claim of r3 under k = %v; want ForeignLeaseError by other", err)
	}
	// The error says it was the floor.
	err = fencepostgres.Claim(ctx, pool, snap("k", 6), "x")
	if want := `fence: resource "x": token 6 of lease "k" is stale: the lease's floor is token 7 (a retired fence of the lease had accepted it)`; err == nil || err.Error() != want {
		t.Fatalf("floor refusal reads %v; want %s", err, want)
	}
}

// TestTableRetentionOptions: KeepForever retires nothing, a negative
// retention is invalid, and a short retention retires without aging.
func TestTableRetentionOptions(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	if err := fencepostgres.Claim(ctx, pool, snap("k", 5), "r"); err != nil {
		t.Fatal(err)
	}
	age(t, pool, "r")
	forever, err := fencepostgres.NewTable(fencepostgres.TableOptions{Retention: lease.KeepForever})
	if err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		if got := walk(t, forever.Sweeper(pool), 10, dry); len(got) != 0 {
			t.Fatalf("KeepForever (dry run %v) removed %q", dry, got)
		}
	}
	if m := readMark(t, pool, "r"); m.Token != 5 {
		t.Fatalf("fence = %v after KeepForever sweeps", m)
	}
	for _, o := range []fencepostgres.TableOptions{{Retention: -2}, {RetireLockTimeout: time.Microsecond}, {RetireLockTimeout: -1}} {
		if _, err := fencepostgres.NewTable(o); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("NewTable(%+v) = %v; want ErrInvalid", o, err)
		}
	}
	if _, err := forever.Sweep(ctx, pool, lease.SweepOptions{}); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Sweep with limit 0 = %v; want ErrInvalid", err)
	}
	short, err := fencepostgres.NewTable(fencepostgres.TableOptions{Retention: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := fencepostgres.Claim(ctx, pool, snap("k", 6), "s"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if got := walk(t, short.Sweeper(pool), 10, false); !slices.Equal(got, []string{"r", "s"}) {
		t.Fatalf("a 1ms retention removed %q; want r and s", got)
	}
}

// TestTableSweepPages walks many fences in small pages: every one is
// visited once, and those due are removed.
func TestTableSweepPages(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	var due []string
	for i := range 25 {
		r := string(rune('a'+i%26)) + "/" + time.Duration(i).String()
		if err := fencepostgres.Claim(ctx, pool, snap("k", lease.Token(i+1)), r); err != nil {
			t.Fatal(err)
		}
		if i%3 != 0 {
			due = append(due, r)
		}
	}
	age(t, pool, due...)
	slices.Sort(due)
	for _, limit := range []int{1, 4, 25, 100} {
		if got := walk(t, hourTable(t).Sweeper(pool), limit, true); !slices.Equal(got, due) {
			t.Fatalf("dry run with pages of %d lists %q; want %q", limit, got, due)
		}
	}
	if got := walk(t, hourTable(t).Sweeper(pool), 4, false); !slices.Equal(got, due) {
		t.Fatalf("Sweep removed %q; want %q", got, due)
	}
	if f := readFloor(t, pool, "k"); f != 24 {
		t.Fatalf("floor %d; want 24, the highest retired token", f)
	}
}

// TestTableSweepLockTimeout: a page whose table lock is not granted within
// the timeout, because a fenced transaction is open, is skipped: no error,
// nothing removed, and the walk moves on. Once the transaction ends, the
// fence retires.
func TestTableSweepLockTimeout(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	if err := fencepostgres.Claim(ctx, pool, snap("k", 5), "old"); err != nil {
		t.Fatal(err)
	}
	age(t, pool, "old")
	table, err := fencepostgres.NewTable(fencepostgres.TableOptions{Retention: time.Hour, RetireLockTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	if err := fencepostgres.Tx(ctx, open, snap("k", 6), []string{"busy"}, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	page, err := table.Sweep(ctx, pool, lease.SweepOptions{Limit: 1})
	if err != nil || len(page.Removed) != 0 || page.Next != "old" {
		t.Fatalf("Sweep behind an open fenced transaction = %+v, %v; want the page skipped, next old", page, err)
	}
	t.Logf("skipped after %v", time.Since(start))
	if m := readMark(t, pool, "old"); m.Token != 5 {
		t.Fatalf("fence of old = %v after a skipped page", m)
	}
	if err := open.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := walk(t, table.Sweeper(pool), 1, false); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("Sweep after the transaction ended removed %q; want old", got)
	}
}

// waitForLockWaiters returns once n sessions of the database wait for a
// lock.
func waitForLockWaiters(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	// Not a timing assertion: a minute is far beyond any wait seen, and
	// only turns a hang into a failure that shows the sessions.
	deadline := time.Now().Add(time.Minute)
	for {
		var waiting int
		err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			rows, _ := pool.Query(t.Context(), `SELECT pid, state, coalesce(wait_event_type, ''), coalesce(wait_event, ''), query
				FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
			var sessions []string
			for rows.Next() {
				var pid int
				var state, wt, w, q string
				_ = rows.Scan(&pid, &state, &wt, &w, &q)
				sessions = append(sessions, fmt.Sprintf("%d %s %s/%s: %s", pid, state, wt, w, q))
			}
			rows.Close()
			t.Fatalf("%d sessions waiting for a lock after a minute, want %d; sessions:\n%s", waiting, n, strings.Join(sessions, "\n"))
		}
		time.Sleep(time.Millisecond) // poll gently; no timing is asserted
	}
}

// retireRace sets up the race the retirement's table lock closes: a
// retirement has deleted the fence of "r" (token 5 of lease "k") and is
// about to raise the floor of "k", when a stale writer with token 4 sends
// its fenced write of "r" (stale, with write); then the retirement
// commits. The floor row of "k" exists (a first retirement raised it to 1)
// and a session of the test holds it FOR UPDATE, which stops the
// retirement right before it raises it. retireRace returns the stale
// writer's error.
func retireRace(t *testing.T, pool *pgxpool.Pool, table *fencepostgres.Table, stale func(context.Context, lease.Snapshot, string) error) error {
	t.Helper()
	ctx := ctxT(t)
	if err := fencepostgres.Claim(ctx, pool, snap("k", 1), "r0"); err != nil {
		t.Fatal(err)
	}
	age(t, pool, "r0")
	if got := walk(t, table.Sweeper(pool), 10, false); !slices.Equal(got, []string{"r0"}) {
		t.Fatalf("first retirement removed %q", got)
	}
	if err := fencepostgres.Claim(ctx, pool, snap("k", 5), "r"); err != nil {
		t.Fatal(err)
	}
	age(t, pool, "r")

	hold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM public.lease_fences_floors WHERE lease_key = 'k' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	swept := make(chan []string, 1)
	go func() {
		page, err := table.Sweep(context.WithoutCancel(ctx), pool, lease.SweepOptions{Limit: 10})
		if err != nil {
			t.Error(err)
		}
		swept <- page.Removed
	}()
	waitForLockWaiters(t, pool, 1) // the retirement, on the floor row
	written := make(chan error, 1)
	go func() { written <- stale(context.WithoutCancel(ctx), snap("k", 4), "r") }()
	waitForLockWaiters(t, pool, 2) // and the stale writer, on whatever the retirement holds
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-swept; !slices.Equal(got, []string{"r"}) {
		t.Fatalf("the racing retirement removed %q; want r", got)
	}
	return <-written
}

// txOn returns a stale write for retireRace: tx (fencepostgres.Tx or a Table's
// Tx) on db, claiming the resource.
func txOn(tx func(context.Context, fencepostgres.Beginner, lease.Snapshot, []string, func(pgx.Tx) error) error, db fencepostgres.Beginner) func(context.Context, lease.Snapshot, string) error {
	return func(ctx context.Context, s lease.Snapshot, r string) error { return tx(ctx, db, s, []string{r}, nil) }
}

// TestTableRetireRace: at READ COMMITTED, a stale writer whose fenced
// write waits for a retirement of its resource sees the floor that
// retirement raised, because the retirement's table lock makes the write
// take its snapshot after the retirement commits.
func TestTableRetireRace(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	wantFloor(t, retireRace(t, pool, raceTable(t), txOn(fencepostgres.Tx, pool)), 4, 5)
	if m := readMark(t, pool, "r"); !m.IsZero() {
		t.Fatalf("fence of r = %v; want none", m)
	}
}

// TestTableRetireRaceWithoutLock shows what the table lock prevents:
// without it the stale writer waits on the deleted row instead, with a
// snapshot taken before the retirement committed, misses the new floor,
// and is admitted.
func TestTableRetireRaceWithoutLock(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	err := retireRace(t, pool, fencepostgres.WithoutRetireLock(raceTable(t)), txOn(fencepostgres.Tx, pool))
	if err != nil {
		t.Fatalf("without the lock the stale writer got %v; the race no longer shows", err)
	}
	t.Logf("without the table lock, fencepostgres.Tx with token 4 after a retirement at token 5: admitted, fence %v", readMark(t, pool, "r"))
}

// TestTableRetireRaceRepeatableRead: a fenced transaction that begins at
// REPEATABLE READ or SERIALIZABLE and waits for a retirement's table lock
// took its snapshot before the wait, when its first statement began: it
// fails to serialize, and the retry is refused by the floor. Without the
// check it would be admitted, although fencepostgres.Tx began the transaction.
func TestTableRetireRaceRepeatableRead(t *testing.T) {
	t.Parallel()
	for _, iso := range isoLevels[1:] {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			pool := newPool(t)
			db := fencepostgres.WithTxOptions(pool, pgx.TxOptions{IsoLevel: iso})
			err := retireRace(t, pool, raceTable(t), txOn(fencepostgres.Tx, db))
			if !fence.IsRetryable(err) || !errors.Is(err, fence.ErrConflict) {
				t.Fatalf("stale writer behind a retirement at %s = %v; want ErrConflict", iso, err)
			}
			t.Logf("%s: %v", iso, err)
			wantFloor(t, fencepostgres.Tx(t.Context(), db, snap("k", 4), []string{"r"}, nil), 4, 5)

			unchecked := newPool(t)
			db = fencepostgres.WithTxOptions(unchecked, pgx.TxOptions{IsoLevel: iso})
			if err := retireRace(t, unchecked, raceTable(t), txOn(fencepostgres.WithoutSerializedCheck(hourTable(t)).Tx, db)); err != nil {
				t.Fatalf("without the check: %v; the hole no longer shows", err)
			}
			t.Logf("%s without the check: token 4 admitted behind the retirement that raised the floor to 5", iso)
		})
	}
}

// TestTableRetireNestedRepeatableRead: a fenced write in a caller's
// REPEATABLE READ or SERIALIZABLE transaction whose snapshot predates a
// retirement fails to serialize rather than miss the floor; its retry is
// refused by the floor. Without the check it would be admitted.
func TestTableRetireNestedRepeatableRead(t *testing.T) {
	t.Parallel()
	for _, iso := range isoLevels[1:] {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			pool := newPool(t)
			ctx := ctxT(t)
			table := hourTable(t)
			if err := fencepostgres.Claim(ctx, pool, snap("k", 5), "r"); err != nil {
				t.Fatal(err)
			}
			age(t, pool, "r")
			nested := func(table *fencepostgres.Table, token lease.Token) error {
				outer, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
				if err != nil {
					t.Fatal(err)
				}
				defer outer.Rollback(ctx)
				var n int
				if err := outer.QueryRow(ctx, `SELECT count(*) FROM pg_class`).Scan(&n); err != nil { // the snapshot
					t.Fatal(err)
				}
				if got := walk(t, table.Sweeper(pool), 10, false); len(got) != 1 {
					t.Fatalf("retirement removed %q", got)
				}
				if err := table.Tx(ctx, outer, snap("k", token), []string{"r"}, nil); err != nil {
					return err
				}
				return outer.Commit(ctx)
			}
			err := nested(table, 4)
			if !fence.IsRetryable(err) || !errors.Is(err, fence.ErrConflict) {
				t.Fatalf("stale write in an older %s transaction = %v; want ErrConflict", iso, err)
			}
			wantFloor(t, table.Tx(ctx, fencepostgres.WithTxOptions(pool, pgx.TxOptions{IsoLevel: iso}), snap("k", 4), []string{"r"}, nil), 4, 5)

			// Without the check, the same sequence admits a stale write
			// that the floor the snapshot sees (5) lets through and the new
			// one (6) would refuse.
			if err := fencepostgres.Claim(ctx, pool, snap("k", 6), "r"); err != nil {
				t.Fatal(err)
			}
			age(t, pool, "r")
			if err := nested(fencepostgres.WithoutSerializedCheck(table), 5); err != nil {
				t.Fatalf("without the check: %v; the hole no longer shows", err)
			}
			if m := readMark(t, pool, "r"); m.Token != 5 || readFloor(t, pool, "k") != 6 {
				t.Fatalf("without the check: fence %v, floor %d", m, readFloor(t, pool, "k"))
			}
			t.Logf("%s without the check: token 5 admitted on r under the floor 6", iso)
		})
	}
}

// TestTableRetireExecModes retires and refuses by the floor with each of
// pgx's query exec modes, as a connection pooler in transaction mode
// needs some of them.
func TestTableRetireExecModes(t *testing.T) {
	t.Parallel()
	url := testserver.Postgres(t).NewDatabase(t)
	for i, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement,
		pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec,
		pgx.QueryExecModeSimpleProtocol,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			table, err := fencepostgres.NewTable(fencepostgres.TableOptions{Table: fmt.Sprintf("fences_%d", i), Retention: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if err := fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{Table: fmt.Sprintf("fences_%d", i)}); err != nil {
				t.Fatal(err)
			}
			for _, r := range []string{"a", "b"} {
				if err := table.Claim(ctx, pool, snap("k", 5), r); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := pool.Exec(ctx, "UPDATE "+table.Name()+" SET updated_at = now() - interval '2 hours' WHERE resource = 'a'"); err != nil {
				t.Fatal(err)
			}
			if got := walk(t, table.Sweeper(pool), 1, true); !slices.Equal(got, []string{"a"}) {
				t.Fatalf("dry run lists %q; want a", got)
			}
			if got := walk(t, table.Sweeper(pool), 1, false); !slices.Equal(got, []string{"a"}) {
				t.Fatalf("Sweep removed %q; want a", got)
			}
			for _, iso := range isoLevels {
				wantFloor(t, table.Tx(ctx, fencepostgres.WithTxOptions(pool, pgx.TxOptions{IsoLevel: iso}), snap("k", 4), []string{"a", "c"}, nil), 4, 5)
			}
			if err := table.Claim(ctx, pool, snap("k", 5), "a"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
