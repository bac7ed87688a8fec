package leasequeue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/golib/lease/lease"
)

var _ lease.Sweeper = (*PostgresSource)(nil)

// Sweep implements lease.Sweeper: it removes the queue's done items that
// were completed more than PostgresOptions.DoneRetention ago, then its
// dead items that died more than DeadRetention ago, on the database's
// clock, and returns their IDs. Each page is one statement (see
// queries/prune.sql) that picks up to o.Limit such rows in the order they
// finished, through the index of finished items, skips rows another
// statement is writing (SKIP LOCKED), and deletes them, checking again in
// the DELETE that each is still finished and past its retention. Pending
// and running items are never removed, also a running item whose claim
// expired, which its worker may still complete.
//
// An item is removed only once its token is below the database's clock
// in microseconds (statement_timestamp()), which it is by then unless its
// token came from a clock ahead of the database's (a lease backend on
// another server, see Source). Enqueue then adds the ID as a new
// item, whose first claim gets max(0 + 1, the clock in microseconds): its
// statement starts after the enqueue that follows the delete's commit, so
// its clock reads at least the delete's, and its token is above every
// token the removed item carried (as long as the clock does not step
// back). So none of the removed item's claims can write the new one. A
// fence of your own keyed by the item (a row written with CompleteTx, say)
// keeps its own last token.
func (s *PostgresSource) Sweep(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
	state, pos, ok, err := s.retention.start(o.Cursor)
	if !ok || err != nil {
		return lease.SweepPage{}, err
	}
	after := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	afterID := ""
	if pos != "" {
		micros, id, ok := strings.Cut(pos, " ")
		us, err := strconv.ParseInt(micros, 10, 64)
		if !ok || err != nil {
			return lease.SweepPage{}, fmt.Errorf("leasequeue: sweep: %q is not a cursor of this source", o.Cursor)
		}
		after, afterID = pgtype.Timestamptz{Time: time.UnixMicro(us), Valid: true}, id
	}
	limit := max(o.Limit, 1)
	rows, err := s.db.Query(ctx, s.prune, s.queue, string(state), ceilMicros(s.retention.of(state)),
		after, afterID, limit, o.DryRun, pos == "")
	if err != nil {
		return lease.SweepPage{}, pgError("prune", s.queue, err)
	}
	defer rows.Close()
	var (
		page    lease.SweepPage
		visited int
		id      string
		at      time.Time
		gone    bool
	)
	for rows.Next() {
		if err := rows.Scan(&id, &at, &gone); err != nil {
			return page, pgError("prune", s.queue, err)
		}
		visited++
		if gone || o.DryRun {
			page.Removed = append(page.Removed, id)
		}
	}
	if err := rows.Err(); err != nil {
		return page, pgError("prune", s.queue, err)
	}
	if visited < limit {
		page.Next = s.retention.after(state)
	} else {
		page.Next = sweepCursor(state, strconv.FormatInt(at.UnixMicro(), 10)+" "+id)
	}
	return page, nil
}
