package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/golib/lease/lease"
)

var _ lease.Sweeper = (*Store)(nil)

// txBeginner is what can begin a transaction with options: a
// *pgxpool.Conn or a *pgx.Conn, but not a pgx.Tx.
type txBeginner interface {
	BeginTx(ctx context.Context, o pgx.TxOptions) (pgx.Tx, error)
}

// Sweep implements lease.Sweeper with one statement per page
// (queries/sweep.sql): it reads up to o.Limit rows whose key comes after
// o.Cursor, in the order of the primary key, and deletes those whose lease
// ended at least Options.Retention ago on the database's clock. Next is
// the page's last key, or "" when the page was short. With o.DryRun it
// runs queries/sweeplist.sql instead, which selects the same rows and
// neither deletes nor locks anything (SELECT is the only privilege it
// needs). With lease.KeepForever it returns at once an empty page and
// Next "".
//
// The statement never waits for a row lock, and it locks only rows that
// it deletes: it skips a row that another session has locked (an acquire
// in progress, a transaction holding CheckGuard's lock), leaving it for a
// later sweep, and it removes a row only if the row's latest version
// still shows the lease it judged ended, so a key acquired meanwhile keeps
// its row. That last check needs READ COMMITTED, so on a pool or a
// connection Sweep runs the statement in a READ COMMITTED transaction of
// its own (BEGIN, the statement, COMMIT), whatever the database's default
// isolation. On a pgx.Tx, whose isolation is set, it runs in that
// transaction: the removals then take effect when the caller commits, the
// rows stay locked until then, and at REPEATABLE READ or SERIALIZABLE a
// row acquired since the transaction's snapshot fails the page with a
// serialization failure, which removes nothing.
//
// Rows written by a version of this package before retention existed,
// whose forced release set the expiry to the Unix epoch and so did not
// record when it happened, are removed once their token (the time their
// lease began, in microseconds) is a retention old.
//
// Sweep needs DELETE and UPDATE on the table; Check reports them missing.
func (s *Store) Sweep(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
	if o.Limit < 1 {
		return lease.SweepPage{}, fmt.Errorf("leasepostgres: sweep: limit %d is not positive", o.Limit)
	}
	if s.retention == lease.KeepForever {
		return lease.SweepPage{}, nil
	}
	c := &sweepCall{cursor: o.Cursor, limit: int64(o.Limit), retention: ttlInterval(s.retention)}
	db := s.db
	if s.pool != nil {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return lease.SweepPage{}, s.notSent(err)
		}
		defer conn.Release()
		db = conn
	}
	b, ok := db.(txBeginner)
	if o.DryRun || !ok { // a read, or a pgx.Tx (or a DB of the caller's own)
		sql := s.q.sweep
		if o.DryRun {
			sql = s.q.sweepList
		}
		if err := c.run(ctx, db, sql); err != nil {
			return lease.SweepPage{}, classify(err, s.names.qualified)
		}
		return c.page(o.Limit), nil
	}
	tx, err := b.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return lease.SweepPage{}, uncommitted(err, s.names.qualified)
	}
	if err := c.run(ctx, tx, s.q.sweep); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return lease.SweepPage{}, uncommitted(err, s.names.qualified)
	}
	if err := tx.Commit(ctx); err != nil {
		return lease.SweepPage{}, classify(err, s.names.qualified)
	}
	return c.page(o.Limit), nil
}

// sweepCall holds the arguments and results of one sweep.sql.
type sweepCall struct {
	cursor    string
	limit     int64
	retention pgtype.Interval

	n       int64
	last    *string
	removed []string
}

func (c *sweepCall) run(ctx context.Context, db DB, sql string) error {
	return db.QueryRow(ctx, sql, c.cursor, c.limit, c.retention).Scan(&c.n, &c.last, &c.removed)
}

// page returns the result of the statement as a page of a walk by limit.
func (c *sweepCall) page(limit int) lease.SweepPage {
	p := lease.SweepPage{Removed: c.removed}
	if c.n >= int64(limit) && c.last != nil {
		p.Next = *c.last
	}
	return p
}

// uncommitted classifies err, from a step of Sweep's own transaction
// before its COMMIT was sent. Whatever happened, the server rolls such a
// transaction back, so nothing was removed, also when the reply was lost.
func uncommitted(err error, table string) error {
	cerr := classify(err, table)
	if errors.Is(cerr, lease.ErrIndeterminate) {
		return fmt.Errorf("leasepostgres: sweep interrupted before its commit, nothing removed: %w", err)
	}
	return cerr
}
