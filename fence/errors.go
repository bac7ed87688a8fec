package fence

import (
	"errors"
	"fmt"
	"time"

	"github.com/golib/lease/internal/refused"
	"github.com/golib/lease/lease"
)

// Sentinel errors. Test for them with [errors.Is]; the typed errors below
// carry the facts and match the sentinels.
var (
	// ErrStale means the fence of a resource has accepted a higher token of
	// the same lease: a newer holder has written. Nothing was written. The
	// error is a *StaleError.
	ErrStale = refused.ErrStale

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

	// ErrImplausibleToken means the token is more than MaxTokenLead ahead
	// of the store's clock, higher than any backend can have issued yet: a
	// forged or corrupted snapshot, or a lease server whose clock jumped
	// ahead. Nothing was written. The error is an *ImplausibleTokenError.
	ErrImplausibleToken = errors.New("fence: implausible token")

	// ErrInvalid wraps the error for a fenced write that can't be sent:
	// a snapshot without a token, a resource name or command that breaks a
	// rule, a token out of a store's range. It is returned before any I/O.
	ErrInvalid = errors.New("fence: invalid fenced write")
)

// StaleError reports a write refused because the resource's fence has
// accepted a higher token of the same lease, or because the token is below
// the floor of its lease key, the highest token of the key's retired
// fences (Floor is then true). It matches ErrStale.
type StaleError struct {
	// Resource names the fenced resource. For a refusal by the floor, which
	// applies to every resource alike, it is the first resource of the
	// write in sorted order.
	Resource string `json:"resource"`
	// Key is the lease key of the refused write (and of the fence).
	Key string `json:"key"`
	// Token is the refused write's token.
	Token lease.Token `json:"token"`
	// Current is the highest token the fence has accepted or, if Floor,
	// the floor of the lease key.
	Current lease.Token `json:"current"`
	// Floor reports a refusal by the floor of the lease key: a fence of
	// the lease accepted token Current and was then retired (see the
	// package documentation, "Retirement"), so every write of the lease
	// with a lower token is stale, whether or not the resource has a fence.
	Floor bool `json:"floor,omitempty"`
}

func (e *StaleError) Error() string {
	if e.Floor {
		return fmt.Sprintf("fence: resource %q: token %d of lease %q is stale: the lease's floor is token %d (a retired fence of the lease had accepted it)",
			e.Resource, e.Token, e.Key, e.Current)
	}
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
// statements (an error with a SQLState method, as *pgconn.PgError has). A stale or foreign token is never retryable: a retry would be
// refused again.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrConflict) {
		return true
	}
	if errors.Is(err, ErrStale) || errors.Is(err, ErrForeignLease) || errors.Is(err, ErrImplausibleToken) {
		return false
	}
	return isConflict(err)
}

// isConflict reports whether err carries SQLSTATE 40001 or 40P01, found
// by the SQLState method of pgx's *pgconn.PgError (and of lib/pq's
// errors), so that this package links no database driver.
func isConflict(err error) bool {
	var e interface{ SQLState() string }
	if !errors.As(err, &e) {
		return false
	}
	c := e.SQLState()
	return c == "40001" || c == "40P01"
}

// invalid returns an error wrapping ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// MaxTokenLead is how far ahead of a store's own clock a token may be: a
// PostgreSQL or Valkey fence refuses a token above the store's clock in
// microseconds plus MaxTokenLead with an *ImplausibleTokenError, and writes
// nothing. The backends of this module issue token = max(last + 1, their
// clock in microseconds), so their tokens run ahead of a store's clock only
// by the skew between the two clocks; a token a day ahead is a forged or
// corrupted snapshot (or a lease server whose clock has jumped a day
// ahead), and accepting it would let one write lock the resource against
// every later holder. Backends that count from 1 (the memory backend)
// issue tokens far below the bound. Memory and Mark.Admit have no clock
// and apply no bound.
const MaxTokenLead = 24 * time.Hour

// ImplausibleTokenError reports a write refused because its token is more
// than MaxTokenLead ahead of the store's clock: no backend can have issued
// it yet. Nothing was written. It matches ErrImplausibleToken.
type ImplausibleTokenError struct {
	// Resource names the fenced resource.
	Resource string `json:"resource"`
	// Key is the lease key of the refused write.
	Key string `json:"key"`
	// Token is the refused write's token.
	Token lease.Token `json:"token"`
	// Largest is the largest token the store accepted at that moment: its
	// clock in microseconds plus MaxTokenLead.
	Largest lease.Token `json:"largest"`
}

// Error says which token of which lease was refused for which resource,
// and the largest token the store accepts now.
func (e *ImplausibleTokenError) Error() string {
	return fmt.Sprintf("fence: resource %q: token %d of lease %q is implausible: more than %v ahead of the store's clock (largest token now %d); nothing written",
		e.Resource, e.Token, e.Key, MaxTokenLead, e.Largest)
}

// Is reports whether target is ErrImplausibleToken.
func (e *ImplausibleTokenError) Is(target error) bool { return target == ErrImplausibleToken }
