package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/lease"
)

var (
	_ lease.PermitAcquirer = (*Store)(nil)
	_ lease.SetAcquirer    = (*Store)(nil)
)

// Outcome of the set functions (setrenew.sql, setrelease.sql) for a key
// without a row; the others are those of renew.sql and release.sql.
const outcomeSetNoRow = 4

// Suffixes of the names of the functions of migration 005: each is named
// after the lease table.
const (
	fnPermit     = "_permit"
	fnSetAcquire = "_setacquire"
	fnSetRenew   = "_setrenew"
	fnSetRelease = "_setrelease"
)

// groupRow is queryRow for a call of the function of migration 005 whose
// name ends in suffix: an error that says the function is missing, or
// that the role may not run it, names the function and the fix.
func (s *Store) groupRow(ctx context.Context, suffix, sql string, args []any, dest ...any) (bool, error) {
	ok, err := s.queryRow(ctx, sql, args, dest...)
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) {
		return ok, err
	}
	fn := pgplumbing.Quote(s.names.schema, s.names.table+suffix)
	switch pgplumbing.ProblemOf(err) {
	case pgplumbing.MissingFunction:
		return false, lease.Misconfigured(fmt.Errorf("leasepostgres: function %s not found (configuration: migration 005 creates it beside lease table %s; %s): %w",
			fn, s.names.qualified, pgplumbing.MigrateHint(migrateFn), pgErr))
	case pgplumbing.MissingPrivilege:
		return false, lease.Misconfigured(fmt.Errorf("leasepostgres: permission denied on function %s or lease table %s (configuration: GRANT EXECUTE ON FUNCTION %s, and SELECT, INSERT, UPDATE, DELETE ON %s, TO the role): %w",
			fn, s.names.qualified, fn, s.names.qualified, pgErr))
	}
	return ok, err
}

// AcquirePermit implements lease.PermitAcquirer in one statement
// (queries/permit.sql), which calls the function leases_permit that
// Migrate creates beside the table (migration 005). Permit acquisitions of
// one semaphore take turns on a transaction-scoped advisory lock, held
// until the statement commits: each reads every permit row of the
// semaphore, so its token is greater than all of theirs, and takes the
// lowest free slot, or tries the next one if a statement that is not a
// permit acquisition took it meanwhile. So acquisitions of one semaphore
// run one at a time on the database, and those of different semaphores in
// parallel.
func (s *Store) AcquirePermit(ctx context.Context, r lease.AcquireRequest, permits int) (int, lease.Token, error) {
	if r.TTL <= 0 {
		return 0, 0, fmt.Errorf("leasepostgres: acquire permit: TTL %v is not positive", r.TTL)
	}
	if permits < 1 || permits > lease.MaxPermits {
		return 0, 0, fmt.Errorf("leasepostgres: acquire permit: %d permits, want 1 to %d", permits, lease.MaxPermits)
	}
	var (
		slot    int32
		granted bool
		token   int64
		holder  string
		left    pgtype.Interval
	)
	ok, err := s.groupRow(ctx, fnPermit, s.q.permit,
		[]any{r.Key, r.Owner, r.Nonce, ttlInterval(r.TTL), int32(permits)},
		&slot, &granted, &token, &holder, &left)
	switch {
	case err != nil:
		return 0, 0, err
	case !ok:
		return 0, 0, errors.New("leasepostgres: acquire permit: the statement returned no row")
	case !granted:
		return 0, 0, &lease.NotAcquiredError{Key: r.Key, Holder: holder, Token: lease.Token(token), Remaining: duration(left)}
	case token <= 0 || slot < 0 || int(slot) >= permits:
		return 0, 0, fmt.Errorf("leasepostgres: acquire permit: table %s returned slot %d, token %d", s.names.qualified, slot, token)
	}
	return int(slot), lease.Token(token), nil
}

// setKeys returns keys sorted without duplicates, or an error naming op
// if there are none or more than lease.MaxSetKeys. It copies keys only if
// they are not sorted already.
func setKeys(op string, keys []string) ([]string, error) {
	if !slices.IsSorted(keys) {
		keys = slices.Sorted(slices.Values(keys))
	}
	for i := 1; i < len(keys); i++ {
		if keys[i] == keys[i-1] {
			keys = slices.Compact(slices.Clone(keys))
			break
		}
	}
	switch {
	case len(keys) == 0:
		return nil, fmt.Errorf("leasepostgres: %s: a set of no keys", op)
	case len(keys) > lease.MaxSetKeys:
		return nil, fmt.Errorf("leasepostgres: %s: %d keys, more than lease.MaxSetKeys (%d)", op, len(keys), lease.MaxSetKeys)
	}
	return keys, nil
}

// AcquireSet implements lease.SetAcquirer in one statement
// (queries/setacquire.sql), which calls the function leases_setacquire
// that Migrate creates beside the table (migration 005). Any set of keys
// is allowed. The function locks the keys' rows one at a time in byte
// order, inserting a row for a key that has none, and stops at the first
// key held by another acquisition, removing the rows it inserted; so two
// acquisitions of overlapping sets never wait for each other in a cycle
// (migrations/005_lease_groups.up.sql says why), and one that finds a key
// held changes nothing.
func (s *Store) AcquireSet(ctx context.Context, keys []string, r lease.AcquireRequest) (lease.Token, error) {
	if r.TTL <= 0 {
		return 0, fmt.Errorf("leasepostgres: acquire set: TTL %v is not positive", r.TTL)
	}
	keys, err := setKeys("acquire set", keys)
	if err != nil {
		return 0, err
	}
	var (
		granted     bool
		key, holder string
		token       pgtype.Int8
		left        pgtype.Interval
	)
	ok, err := s.groupRow(ctx, fnSetAcquire, s.q.setAcquire, []any{keys, r.Owner, r.Nonce, ttlInterval(r.TTL)},
		&granted, &key, &token, &holder, &left)
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return 0, errors.New("leasepostgres: acquire set: the statement returned no row")
	case !granted:
		return 0, &lease.NotAcquiredError{Key: key, Holder: holder, Token: lease.Token(token.Int64), Remaining: duration(left)}
	case !token.Valid || token.Int64 <= 0:
		return 0, fmt.Errorf("leasepostgres: acquire set: table %s returned token %d", s.names.qualified, token.Int64)
	}
	return lease.Token(token.Int64), nil
}

// RenewSet implements lease.SetAcquirer in one statement
// (queries/setrenew.sql), which calls the function leases_setrenew: it
// locks the keys' rows in byte order, as AcquireSet does, and extends
// them all only if a holds every one.
func (s *Store) RenewSet(ctx context.Context, keys []string, a lease.Acquisition, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("leasepostgres: renew set: TTL %v is not positive", ttl)
	}
	keys, err := setKeys("renew set", keys)
	if err != nil {
		return err
	}
	return s.setOutcome(ctx, "renew set", fnSetRenew, s.q.setRenew, []any{keys, a.Nonce, int64(a.Token), ttlInterval(ttl)}, a)
}

// ReleaseSet implements lease.SetAcquirer in one statement
// (queries/setrelease.sql), which calls the function leases_setrelease:
// it locks the keys' rows in byte order, as AcquireSet does, and releases
// those that a still holds as Release does. If a waiter marked one of them
// (see WatchReleases), it notifies waiting acquirers when it commits.
func (s *Store) ReleaseSet(ctx context.Context, keys []string, a lease.Acquisition) error {
	keys, err := setKeys("release set", keys)
	if err != nil {
		return err
	}
	return s.setOutcome(ctx, "release set", fnSetRelease, s.q.setRelease, []any{keys, a.Nonce, int64(a.Token), s.channel}, a)
}

// setOutcome runs setrenew.sql or setrelease.sql and converts its outcome
// to an error.
func (s *Store) setOutcome(ctx context.Context, op, suffix, sql string, args []any, a lease.Acquisition) error {
	var (
		outcome int32
		key     string
	)
	ok, err := s.groupRow(ctx, suffix, sql, args, &outcome, &key)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("leasepostgres: %s: the statement returned no row", op)
	case outcome == outcomeSetNoRow:
		outcome = outcomeNoRow
	}
	a.Key = key
	return lost(a, outcome)
}
