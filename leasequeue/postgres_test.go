package leasequeue_test

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasequeue/partition"
	"github.com/golib/lease/leasetest"
)

func TestPostgresMigrations(t *testing.T) {
	files, err := fs.Glob(leasequeue.PostgresMigrations(), "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(files, []string{"001_leasequeue.down.sql", "001_leasequeue.up.sql", "002_leasequeue_ready_at.down.sql", "002_leasequeue_ready_at.up.sql", "003_leasequeue_claims.down.sql", "003_leasequeue_claims.up.sql", "004_leasequeue_finished_at.down.sql", "004_leasequeue_finished_at.up.sql"}) {
		t.Fatalf("migration files %q", files)
	}
	for _, o := range []leasequeue.PostgresOptions{
		{Table: strings.Repeat("t", 53)},
		{Schema: strings.Repeat("s", 64)},
		{Table: "nul\x00"},
	} {
		if _, err := leasequeue.NewPostgresSource(nil, "q", o); err == nil {
			t.Errorf("NewPostgresSource(nil, %+v) succeeded", o)
		}
		if err := leasequeue.MigratePostgres(context.Background(), nil, o); err == nil {
			t.Errorf("MigratePostgres(%+v) with a nil database succeeded", o)
		}
	}
}

// TestPostgresMissingTables: a source on tables that were never created
// says what to run, and its error matches lease.ErrMisconfigured, so that a
// waiting claim gives up at once; CheckPostgres says so before.
func TestPostgresMissingTables(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgPool(t, testserver.Postgres(t).NewDatabase(t), 2)
	src, err := leasequeue.NewPostgresSource(pool, "q", leasequeue.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = src.Enqueue(ctx, "a")
	if !errors.Is(err, lease.ErrMisconfigured) || !strings.Contains(err.Error(), "leasectl migrate") ||
		!strings.Contains(err.Error(), "leasequeue.MigratePostgres") {
		t.Fatalf("Enqueue without the tables = %v; want lease.ErrMisconfigured advising leasectl migrate and leasequeue.MigratePostgres", err)
	}
	err = leasequeue.CheckPostgres(ctx, pool, leasequeue.PostgresOptions{})
	if err == nil || !strings.Contains(err.Error(), `items table "public"."leasequeue_jobs" not found`) ||
		!strings.Contains(err.Error(), `roster table "public"."leasequeue_jobs_members" not found`) || !strings.Contains(err.Error(), "leasectl migrate") {
		t.Fatalf("CheckPostgres without the tables = %v; want both named, with leasectl migrate advised", err)
	}
	if err := leasequeue.MigratePostgres(ctx, pool, leasequeue.PostgresOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := leasequeue.CheckPostgres(ctx, pool, leasequeue.PostgresOptions{}); err != nil {
		t.Fatalf("CheckPostgres after MigratePostgres: %v", err)
	}
	if _, err := src.Enqueue(ctx, "a"); err != nil {
		t.Fatalf("Enqueue after MigratePostgres: %v", err)
	}
}

// TestPostgresOddNames: the tables may have any name; replicas that
// migrate at the same time all succeed; the source and the roster work on
// the tables they name.
func TestPostgresOddNames(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgPool(t, testserver.Postgres(t).NewDatabase(t), 8)
	o := leasequeue.PostgresOptions{Schema: `odd "schema"`, Table: `jobs; DROP TABLE x --`}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := leasequeue.MigratePostgres(ctx, pool, o); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := leasequeue.MigratePostgres(ctx, pool, o); err != nil {
		t.Fatalf("second MigratePostgres: %v", err)
	}
	var versions int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM "odd ""schema"""."jobs; DROP TABLE x --_migrations"`).Scan(&versions); err != nil || versions != 4 {
		t.Fatalf("versions recorded: %d, %v", versions, err)
	}
	src, err := leasequeue.NewPostgresSource(pool, "q", o)
	if err != nil {
		t.Fatal(err)
	}
	if src.Table() != `"odd ""schema"""."jobs; DROP TABLE x --"` {
		t.Errorf("Table() = %s", src.Table())
	}
	mustEnqueue(ctx, t, src, "a")
	if err := src.Complete(ctx, mustClaim(ctx, t, src, "w", "a", 1), "a"); err != nil {
		t.Fatal(err)
	}
	r, err := partition.NewPostgresRoster(pool, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"b", "a", "a"} {
		if err := r.Join(ctx, "g", w); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Leave(ctx, "g", "b"); err != nil {
		t.Fatal(err)
	}
	if names, err := r.Members(ctx, "g"); err != nil || !slices.Equal(names, []string{"a"}) {
		t.Fatalf("Members = %q, %v; want [a]", names, err)
	}
}

// TestCompleteTx: the item is done exactly when the handler's writes are
// committed.
func TestCompleteTx(t *testing.T) {
	t.Parallel()
	s := postgresStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := s.source(t, "tx").(*leasequeue.PostgresSource)
	mustEnqueue(ctx, t, src, "ok", "fails")
	q := newQueue(t, s, src, "w", leasequeue.Options{Name: "tx", Policy: loadedPolicy(t, 2*time.Second),
		RetryDelay: func(int) time.Duration { return time.Hour }})
	insert := func(tx pgx.Tx, id string) error {
		_, err := tx.Exec(ctx, `INSERT INTO completions (item, token) VALUES ($1, 0)`, id)
		return err
	}

	c, err := q.Claim(ctx, "fails")
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = src.CompleteTx(ctx, c, func(tx pgx.Tx) error {
		if err := insert(tx, "fails"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("CompleteTx with a failing fn = %v; want fn's error", err)
	}
	if it := mustItem(ctx, t, src, "fails"); it.State != leasequeue.Pending || it.LastError != "boom" {
		t.Fatalf("after a failed CompleteTx: %+v; want it pending with fn's error", it)
	}

	c, err = q.Claim(ctx, "ok")
	if err != nil {
		t.Fatal(err)
	}
	if err := src.CompleteTx(ctx, c, func(tx pgx.Tx) error { return insert(tx, "ok") }); err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx); !errors.Is(err, leasequeue.ErrClosed) {
		t.Fatalf("Complete after CompleteTx = %v; want ErrClosed", err)
	}
	if it := mustItem(ctx, t, src, "ok"); it.State != leasequeue.Done {
		t.Fatalf("after CompleteTx: %+v", it)
	}
	got, err := s.completions(ctx, src, nil)
	if err != nil || got["ok"] != 1 || got["fails"] != 0 {
		t.Fatalf("completions %v, %v; want only ok's", got, err)
	}

	// A stale claim's fn never runs.
	called := false
	err = src.CompleteTx(ctx, mustClaimAndTakeOver(ctx, t, s, src), func(pgx.Tx) error { called = true; return nil })
	if !errors.Is(err, fence.ErrStale) || called {
		t.Fatalf("CompleteTx of a taken-over claim = %v, fn called %v", err, called)
	}
}

// mustClaimAndTakeOver enqueues an item, claims it on a paused worker and
// has it taken over by another; it returns the paused worker's claim.
func mustClaimAndTakeOver(ctx context.Context, t *testing.T, s *store, src source) *leasequeue.Claim {
	t.Helper()
	mustEnqueue(ctx, t, src, "taken")
	o := leasequeue.Options{Name: "tx", Policy: loadedPolicy(t, time.Second)}
	paused := leasetest.NewFakeClock(time.Now()) // never moves: the worker is paused
	a := newQueueOnClock(t, s, src, "paused", paused, o)
	c, err := a.Claim(ctx, "taken")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Release(context.Background()) })
	cb := claimOnceFree(ctx, t, newQueue(t, s, src, "other", o), "taken")
	t.Cleanup(func() { cb.Release(context.Background()) })
	return c
}

// TestPostgresPruneUsesTheFinishedIndex: the generic plan of a Sweep page
// reads the index of finished items, in its order, so a page costs its
// own rows and not a scan of the queue.
func TestPostgresPruneUsesTheFinishedIndex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := postgresStore(t).source(t, "plan").(*leasequeue.PostgresSource)
	tx, err := src.DB().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, sql := range []string{
		"SET LOCAL enable_seqscan = off", // an empty table would be read whole otherwise
		"SET LOCAL plan_cache_mode = force_generic_plan",
		"PREPARE prune AS " + src.PruneStatement(),
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	rows, err := tx.Query(ctx, `EXPLAIN EXECUTE prune('plan', 'done', 1000, '-infinity', '', 10, false, true)`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	for _, want := range []string{
		// The page: a range of the index, from the cursor on.
		"Index Scan using leasequeue_jobs_finished",
		"Index Cond: ((queue = $1) AND (state = $2) AND (finished_at <= ",
		"(ROW(finished_at, id) > ROW($4, $5)))",
		// The DELETE: the rows picked, by their ctid.
		"Tid Scan on leasequeue_jobs",
	} {
		if !strings.Contains(plan, want) {
			t.Errorf("the plan of a Sweep page lacks %s:\n%s", want, plan)
		}
	}
}
