package fence

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/golib/lease/lease"
)

// Sentinel errors. Test for them with [errors.Is]; the typed errors below
// carry the facts and match the sentinels.
var (
	// ErrStale means the fence of a resource has accepted a higher token of
	// the same lease: a newer holder has written. Nothing was written. The
	// error is a *StaleError.
	ErrStale = errors.New("fence: stale token")

	// ErrForeignLease means the resource is fenced by a different lease key
	// than the snapshot's. Tokens of different leases are unrelated, so the
	// write is refused whatever the numbers. Nothing was written. The error
	// is a *ForeignLeaseError.
	ErrForeignLease = errors.New("fence: resource is fenced by another lease")

	// ErrConflict means the database rolled the transaction back because
	// of a serialization failure (SQLSTATE 40001) or a deadlock (40P01).
	// Nothing was written: run the whole transaction again (the retry
	// checks the fences afresh). The error is a *ConflictError; IsRetryable
	// reports true for it.
	ErrConflict = errors.New("fence: transaction conflict")

	// ErrInvalid wraps the error for a fenced write that can't be sent:
	// a snapshot without a token, a resource name or command that breaks a
	// rule, a token out of a store's range. It is returned before any I/O.
	ErrInvalid = errors.New("fence: invalid fenced write")
)

// StaleError reports a write refused because the resource's fence has
// accepted a higher token of the same lease. It matches ErrStale.
type StaleError struct {
	// Resource names the fenced resource.
	Resource string `json:"resource"`
	// Key is the lease key of the refused write (and of the fence).
	Key string `json:"key"`
	// Token is the refused write's token.
	Token lease.Token `json:"token"`
	// Current is the highest token the fence has accepted.
	Current lease.Token `json:"current"`
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: resource %q: token %d of lease %q is stale: the fence has accepted token %d",
		e.Resource, e.Token, e.Key, e.Current)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// ForeignLeaseError reports a write refused because the resource is fenced
// by another lease key. It matches ErrForeignLease.
type ForeignLeaseError struct {
	// Resource names the fenced resource.
	Resource string `json:"resource"`
	// Key is the lease key of the refused write.
	Key string `json:"key"`
	// Token is the refused write's token.
	Token lease.Token `json:"token"`
	// FencedBy is the lease key the resource is fenced by.
	FencedBy string `json:"fenced_by"`
	// Current is the highest token of FencedBy the fence has accepted.
	Current lease.Token `json:"current"`
}

func (e *ForeignLeaseError) Error() string {
	return fmt.Sprintf("fence: resource %q is fenced by lease %q (token %d), not by lease %q (token %d)",
		e.Resource, e.FencedBy, e.Current, e.Key, e.Token)
}

// Is reports whether target is ErrForeignLease.
func (e *ForeignLeaseError) Is(target error) bool { return target == ErrForeignLease }

// ConflictError reports a transaction the database rolled back because of a
// serialization failure or a deadlock. It matches ErrConflict and unwraps to
// the database's error.
type ConflictError struct {
	// Resources are the fenced resources of the transaction.
	Resources []string
	// Err is the database's error (a *pgconn.PgError with SQLSTATE 40001 or
	// 40P01).
	Err error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("fence: resources %q: transaction rolled back by a conflict, safe to retry: %v", e.Resources, e.Err)
}

// Is reports whether target is ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Unwrap returns the database's error.
func (e *ConflictError) Unwrap() error { return e.Err }

// IsRetryable reports whether err says that the whole transaction may be
// run again: it matches ErrConflict, or it carries a PostgreSQL
// serialization failure (40001) or deadlock (40P01) from the caller's own
// statements. A stale or foreign token is never retryable: a retry would be
// refused again.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrConflict) {
		return true
	}
	if errors.Is(err, ErrStale) || errors.Is(err, ErrForeignLease) {
		return false
	}
	return isConflict(err)
}

// isConflict reports whether err carries SQLSTATE 40001 or 40P01.
func isConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// invalid returns an error wrapping ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
