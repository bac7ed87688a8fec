package postgres

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/golib/lease/lease"
)

var (
	_ lease.Lister        = (*Store)(nil)
	_ lease.ForceReleaser = (*Store)(nil)
)

// List implements lease.Lister with one statement per page
// (queries/list.sql): the table's rows whose key starts with prefix, in
// the order of the key column's collation, at most limit per page. The
// cursor is the last key of the page, "" when no row follows it (the
// statement reads one row more than it returns to know).
func (s *Store) List(ctx context.Context, prefix, cursor string, limit int) ([]lease.Record, string, error) {
	if limit < 1 {
		return nil, "", fmt.Errorf("leasepostgres: list: limit %d is not positive", limit)
	}
	if cursor != "" && !strings.HasPrefix(cursor, prefix) {
		return nil, "", fmt.Errorf("leasepostgres: list: cursor %q does not belong to a listing of prefix %q", cursor, prefix)
	}
	db := s.db
	if s.pool != nil {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			return nil, "", s.notSent(err)
		}
		defer c.Release()
		db = c
	}
	rows, err := db.Query(ctx, loadQuery("list", s.names), prefix, cursor, min(int64(limit), math.MaxInt64-1)+1)
	if err != nil {
		return nil, "", classify(err, s.names.qualified)
	}
	defer rows.Close()
	var recs []lease.Record
	for rows.Next() {
		var (
			rec   lease.Record
			held  bool
			owner string
			token int64
			left  int64
			h     history
		)
		if err := rows.Scan(&rec.Key, &held, &owner, &token, &left, &h.acquired, &h.renewed, &h.transitions,
			&h.candidates, &h.ending, &h.preferred); err != nil {
			return nil, "", classify(err, s.names.qualified)
		}
		rec.Token = lease.Token(token)
		if held || len(h.candidates) > 0 {
			rec.Held, rec.Owner, rec.Remaining = held, owner, remaining(left)
		}
		h.fill(&rec)
		recs = append(recs, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, "", classify(err, s.names.qualified)
	}
	next := ""
	if len(recs) > limit {
		recs = recs[:limit]
		next = recs[limit-1].Key
	}
	return recs, next, nil
}

// Outcomes of forcerelease.sql.
const (
	forceNotHeld       = 0
	forceReleased      = 1
	forceEnded         = 2
	forceSuperseded    = 3
	forceForceReleased = 4
	forceNoRow         = 5
)

// forceLost maps the outcomes of forcerelease.sql that end in a
// *lease.LostError to its reason.
var forceLost = map[int32]lease.LostReason{
	forceEnded:         lease.Expired,
	forceSuperseded:    lease.Superseded,
	forceForceReleased: lease.ForceReleased,
	forceNoRow:         lease.RecordLost,
}

// ForceRelease implements lease.ForceReleaser in one statement
// (queries/forcerelease.sql) that sets the row's expiry to two thousand
// years before now, long past as Release's thousand years, and notifies
// waiters if one marked the key. It also ends a hand-off's standing offer
// (see HandOff), keeping its token; the record it returns then shows the
// offer (Held false, Candidates). The ended holder's Renew and Release
// tell that expiry from Release's, and Sweep reads the time of the forced
// release from it; a row whose expiry is the Unix epoch, as the previous
// version of this statement set it, counts as force-released too.
func (s *Store) ForceRelease(ctx context.Context, key string, token lease.Token) (lease.Record, error) {
	if err := lease.ValidateKey(key); err != nil {
		return lease.Record{}, fmt.Errorf("leasepostgres: force release: %w", err)
	}
	var (
		outcome int32
		tok     *int64
		held    bool
		owner   string
		left    int64
		h       history
	)
	ok, err := s.queryRow(ctx, loadQuery("forcerelease", s.names),
		[]any{key, int64(token), s.channel}, &outcome, &tok, &held, &owner, &left, &h.acquired, &h.renewed, &h.transitions, &h.candidates)
	if err != nil {
		return lease.Record{}, err
	}
	if !ok {
		return lease.Record{}, lease.Indeterminate(fmt.Errorf("leasepostgres: force release %q: the statement returned no row", key))
	}
	prev := lease.Record{Key: key}
	if tok != nil {
		prev.Token = lease.Token(*tok)
	}
	if held {
		prev.Held, prev.Owner, prev.Remaining = true, owner, remaining(left)
	}
	if len(h.candidates) > 0 { // a standing offer: nobody held the key
		prev.Held, h.ending = false, int32(lease.EndHandedOff)
	}
	h.fill(&prev)
	switch outcome {
	case forceReleased, forceNotHeld:
		return prev, nil
	}
	if reason, ok := forceLost[outcome]; ok {
		return prev, &lease.LostError{Key: key, Token: token, Reason: reason}
	}
	return prev, lease.Indeterminate(fmt.Errorf("leasepostgres: force release %q: unexpected outcome %d", key, outcome))
}
