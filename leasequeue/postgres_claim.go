package leasequeue

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/lease"
)

// claimReady implements Source in one statement (of its own shape for
// n = 1, the cheapest for a single row).
func (s *PostgresSource) claimReady(ctx context.Context, r claimReq, n int) ([]grant, error) {
	switch {
	case n <= 0:
		return nil, nil
	case n == 1:
		// Half the server's time of the general statement, measured
		// against a plain SKIP LOCKED loop's claim; read through QueryRow,
		// which allocates less than collecting rows.
		var g grantRow
		err := s.db.QueryRow(ctx, s.claimOne, s.queue, n, r.KeyPrefix, r.Owner, r.Nonce, millis(r.TTL), maxLead).
			Scan(&g.id, &g.token, &g.attempt, &g.age)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil, nil
		case err != nil:
			return nil, pgError("claim from", s.queue, err)
		}
		return []grant{g.granted()}, nil
	}
	rows, err := s.db.Query(ctx, s.claim, s.queue, n, r.KeyPrefix, r.Owner, r.Nonce, millis(r.TTL), maxLead)
	if err != nil {
		return nil, pgError("claim from", s.queue, err)
	}
	defer rows.Close()
	// One row value and one list of its fields for all rows, where
	// pgx.CollectRows would allocate both for each.
	gs := make([]grant, 0, n)
	var g grantRow
	dest := []any{&g.id, &g.token, &g.attempt, &g.age}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, pgError("claim from", s.queue, err)
		}
		gs = append(gs, g.granted())
	}
	if err := rows.Err(); err != nil {
		return nil, pgError("claim from", s.queue, err)
	}
	return gs, nil
}

// grantRow is a row of claim.sql, claim_one.sql or (without the ID)
// claim_item.sql.
type grantRow struct {
	id      string
	token   int64
	attempt int32
	age     pgtype.Int8 // microseconds; not valid when unknown
}

func (g grantRow) granted() grant {
	r := grant{ID: g.id, Token: lease.Token(g.token), begun: begun{Attempt: int(g.attempt)}}
	if g.age.Valid {
		r.Age = time.Duration(g.age.Int64) * time.Microsecond
	}
	return r
}

// claimID implements Source in one statement, and one more to say why
// it was refused.
func (s *PostgresSource) claimID(ctx context.Context, r claimReq, id string) (grant, error) {
	g, key := grantRow{id: id}, r.KeyPrefix+escapeID(id)
	err := s.db.QueryRow(ctx, s.claimItem, s.queue, id, key, r.Owner, r.Nonce, millis(r.TTL), maxLead).
		Scan(&g.token, &g.attempt, &g.age)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return grant{}, s.claimRefusal(ctx, id, key)
	case err != nil:
		return grant{}, pgError("claim", id, err)
	}
	return g.granted(), nil
}

// claimRefusal explains why item id, whose lease key is key, could not be
// claimed.
func (s *PostgresSource) claimRefusal(ctx context.Context, id, key string) error {
	rec, state, largest, err := s.claimState(ctx, id)
	switch {
	case err != nil:
		return err
	case state == Done || state == Dead:
		return finished(id, state)
	case !rec.Held && int64(rec.Token) >= largest:
		// No claim can get a plausible token above the item's.
		return &fence.ImplausibleTokenError{Resource: keyspace.Tag(s.queue, id), Key: key, Token: rec.Token, Largest: lease.Token(largest)}
	}
	// Held by a current claim, or locked by a claim being written right
	// now: either way another worker has it.
	return &lease.NotAcquiredError{Key: key, Holder: rec.Owner, Token: rec.Token, Remaining: rec.Remaining}
}

// renewClaim implements Source in one statement, and one more to say why
// it was refused.
func (s *PostgresSource) renewClaim(ctx context.Context, id string, a lease.Acquisition, ttl time.Duration) error {
	if err := checkToken(lease.Snapshot{Key: a.Key, Token: a.Token}); err != nil {
		return err
	}
	tag, err := s.db.Exec(ctx, s.renew, s.queue, id, int64(a.Token), a.Nonce, millis(ttl))
	switch {
	case err != nil:
		return pgError("renew claim of", id, err)
	case tag.RowsAffected() == 0:
		return s.lostClaim(ctx, id, a)
	}
	return nil
}

// releaseClaim implements Source in one statement, and one more to say
// why it was refused.
func (s *PostgresSource) releaseClaim(ctx context.Context, id string, a lease.Acquisition) error {
	if a.Token > 1<<63-1 {
		return s.lostClaim(ctx, id, a)
	}
	tag, err := s.db.Exec(ctx, s.release, s.queue, id, int64(a.Token), a.Nonce)
	switch {
	case err != nil:
		return pgError("release claim of", id, err)
	case tag.RowsAffected() == 0:
		return s.lostClaim(ctx, id, a)
	}
	return nil
}

// lostClaim returns the *lease.LostError of claim a of item id, refused
// by a renew or release: Superseded if the item carries a newer token,
// Expired otherwise.
func (s *PostgresSource) lostClaim(ctx context.Context, id string, a lease.Acquisition) error {
	rec, _, _, err := s.claimState(ctx, id)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	reason := lease.Expired
	if rec.Token > a.Token {
		reason = lease.Superseded
	}
	return &lease.LostError{Key: a.Key, Token: a.Token, Reason: reason}
}

// inspectClaim implements Source in one statement. The Record's Key is
// left empty.
func (s *PostgresSource) inspectClaim(ctx context.Context, id string) (lease.Record, error) {
	rec, _, _, err := s.claimState(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return lease.Record{}, nil // never claimed: free, no token known
	}
	return rec, err
}

// claimState reads the claim of item id: held while the item is running
// under a claim that has not expired. It also returns the largest
// plausible token at that moment (see maxLead).
func (s *PostgresSource) claimState(ctx context.Context, id string) (lease.Record, State, int64, error) {
	var (
		state   string
		claim   bool
		owner   string
		token   int64
		remain  int64 // microseconds
		largest int64
	)
	err := s.db.QueryRow(ctx, s.claimStateQ, s.queue, id, maxLead).Scan(&state, &claim, &owner, &token, &remain, &largest)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return lease.Record{}, "", 0, notFound(id)
	case err != nil:
		return lease.Record{}, "", 0, pgError("read claim of", id, err)
	}
	rec := lease.Record{Token: lease.Token(token)}
	if State(state) == Running && claim && remain > 0 {
		rec.Held, rec.Owner, rec.Remaining = true, owner, time.Duration(remain)*time.Microsecond
	}
	return rec, State(state), largest, nil
}
