package fencepostgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/lease"
)

// Sweep retires one page of the table's fences that have not advanced for
// the table's retention (TableOptions.Retention), on the database's clock:
// in one transaction on db it deletes their rows and raises the floor of
// each of their lease keys to the highest token deleted under it. From
// then on every fenced write of such a lease key with a token below its
// floor is refused with a *StaleError (Floor true), on every resource, so
// a stale writer to a retired resource is still refused; a resource
// retired may be fenced again, by its lease key or by another. See the
// documentation of package fence, "Retirement", for why this is safe.
//
// The page is the next o.Limit resources after o.Cursor in byte order;
// SweepPage.Removed names those retired (with o.DryRun, those that would
// be: a dry run takes no lock and writes nothing) and Next is the page's
// last resource, or "" once the walk is complete. With a retention of
// lease.KeepForever Sweep retires nothing and returns an empty page.
//
// The transaction is READ COMMITTED and first takes the fences table in
// SHARE ROW EXCLUSIVE mode, which waits for every fenced transaction in
// flight on the table to end and holds back those that begin meanwhile
// until it commits: that is what lets a fenced write that raced the
// retirement see the new floor. It waits for the lock at most
// TableOptions.RetireLockTimeout (server-side lock_timeout); a page whose
// lock is not granted in time is skipped, not an error: nothing of it is
// removed, Next moves past it, and its fences retire on a later sweep.
// Concurrent sweeps, from any number of processes, are safe and take
// turns.
//
// db must be a pool or a connection (not a transaction: the table lock
// must end with the page). The role needs SELECT, DELETE on the fences
// table and SELECT, INSERT, UPDATE on its floors table.
func (t *Table) Sweep(ctx context.Context, db TxBeginner, o lease.SweepOptions) (lease.SweepPage, error) {
	if db == nil {
		return lease.SweepPage{}, invalid("Sweep: nil database")
	}
	if o.Limit < 1 {
		return lease.SweepPage{}, invalid("Sweep: limit %d is not positive", o.Limit)
	}
	if t.retention == lease.KeepForever {
		return lease.SweepPage{}, nil
	}
	if o.DryRun {
		return t.duePage(ctx, db, o, false)
	}
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return lease.SweepPage{}, t.sweepError("begin", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", t.lockTimeout.Milliseconds())); err != nil {
		return lease.SweepPage{}, t.sweepError("set lock_timeout", err)
	}
	if _, err := tx.Exec(ctx, t.lock); err != nil {
		if pgplumbing.Code(err) == pgplumbing.LockNotAvailable && ctx.Err() == nil {
			_ = tx.Rollback(ctx)
			return t.duePage(ctx, db, o, true)
		}
		return lease.SweepPage{}, t.sweepError("lock", err)
	}
	rows, err := tx.Query(ctx, t.retire, o.Cursor, o.Limit, t.retention.Microseconds())
	if err != nil {
		return lease.SweepPage{}, t.sweepError("retire", err)
	}
	removed, next, err := readPage(rows, o.Limit)
	if err != nil {
		return lease.SweepPage{}, t.sweepError("retire", err)
	}
	if err := tx.Commit(ctx); err != nil {
		// Whether or not it committed, the page is safe: a retirement is
		// all or nothing. Report none of it.
		return lease.SweepPage{}, t.sweepError("commit", err)
	}
	return lease.SweepPage{Removed: removed, Next: next}, nil
}

// duePage runs the dry run of a page; skipped reports only where the next
// page begins.
func (t *Table) duePage(ctx context.Context, db TxBeginner, o lease.SweepOptions, skipped bool) (lease.SweepPage, error) {
	var page lease.SweepPage
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, t.due, o.Cursor, o.Limit, t.retention.Microseconds())
		if err != nil {
			return err
		}
		page.Removed, page.Next, err = readPage(rows, o.Limit)
		return err
	})
	if err != nil {
		return lease.SweepPage{}, t.sweepError("list", err)
	}
	if skipped {
		page.Removed = nil
	}
	return page, nil
}

// readPage reads the rows of retire.sql or due.sql: the resources, and
// the page's last resource with how many it visited.
func readPage(rows pgx.Rows, limit int) (removed []string, next string, err error) {
	var (
		resource *string
		visited  *int64
	)
	_, err = pgx.ForEachRow(rows, []any{&resource, &visited}, func() error {
		switch {
		case visited == nil && resource != nil:
			removed = append(removed, *resource)
		case visited != nil && *visited >= int64(limit) && resource != nil:
			next = *resource
		}
		return nil
	})
	return removed, next, err
}

// sweepError explains an error of a sweep's step.
func (t *Table) sweepError(step string, err error) error {
	switch p := pgplumbing.ProblemOf(err); p {
	case pgplumbing.MissingTable:
		return lease.Misconfigured(fmt.Errorf("fence: sweep %s: %s: the table or its floors table %s does not exist (configuration: %s, or apply fencepostgres.Migrations): %w", t.qualified, step, t.floors, pgplumbing.MigrateHint(migrateFn), err))
	case pgplumbing.MissingPrivilege:
		return lease.Misconfigured(fmt.Errorf("fence: sweep %s: %s: permission denied (configuration: GRANT SELECT, DELETE on the fences table, SELECT, INSERT, UPDATE on %s to the role): %w", t.qualified, step, t.floors, err))
	case pgplumbing.NoProblem:
	default:
		return lease.Misconfigured(fmt.Errorf("fence: sweep %s: %s (configuration: %s): %w", t.qualified, step, p.Hint(migrateFn, "SELECT, DELETE ON "+t.qualified+", SELECT, INSERT, UPDATE ON "+t.floors), err))
	}
	return fmt.Errorf("fence: sweep %s: %s: %w", t.qualified, step, err)
}

// Sweeper returns the lease.Sweeper of the table on db, a pool or a
// connection: its Sweep is Table.Sweep on db. Pass it in
// lease.ClientOptions.Sweepers, and a Client retires the table's fences
// in the background, once across replicas.
func (t *Table) Sweeper(db TxBeginner) lease.Sweeper { return tableSweeper{t: t, db: db} }

type tableSweeper struct {
	t  *Table
	db TxBeginner
}

func (s tableSweeper) Sweep(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
	return s.t.Sweep(ctx, s.db, o)
}
