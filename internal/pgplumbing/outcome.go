package pgplumbing

import (
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/golib/lease/internal/applied"
)

// Classify says whether the request that returned err was applied. It is the
// one answer to that question for every package of this module that talks
// to PostgreSQL:
//
//   - nil: [applied.Yes];
//   - an error pgconn marks safe to retry (nothing was sent: a context that
//     had ended before the write, a write that failed before its first
//     byte), an error marked by [NotSent], a *pgconn.ConnectError (no
//     session existed), pgx.ErrTxClosed and pgx.ErrTxCommitRollback (the
//     server rolled the failed transaction back): [applied.No];
//   - a *pgconn.PgError whose untranslated severity is FATAL or PANIC: the
//     server ended the session, possibly after the commit, so [applied.Unknown];
//   - any other *pgconn.PgError (ERROR: constraint, serialization failure,
//     deadlock, statement_timeout, a cancelled query, ...): [applied.No];
//   - anything else (a timeout or a reset after the request was written, a
//     context that ended while waiting for the reply): [applied.Unknown].
//
// A bare context error, as a pool returns when no connection could be had
// in time, is [applied.Unknown]: pgconn reports a context that ends after
// the write the same way. Callers that know the request was not sent mark
// the error with [NotSent].
func Classify(err error) applied.Outcome {
	if err == nil {
		return applied.Yes
	}
	var connErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	switch {
	case pgconn.SafeToRetry(err), errors.As(err, &connErr),
		errors.Is(err, pgx.ErrTxClosed), errors.Is(err, pgx.ErrTxCommitRollback):
		return applied.No
	case errors.As(err, &pgErr):
		if SessionEnded(pgErr) {
			return applied.Unknown
		}
		return applied.No
	}
	return applied.Unknown
}

// SessionEnded reports whether pgErr is FATAL or PANIC: the server ended
// the session, possibly around a commit. It reads SeverityUnlocalized, and
// the translated Severity only from servers older than 9.6, which send no
// untranslated one.
func SessionEnded(pgErr *pgconn.PgError) bool {
	sev := pgErr.SeverityUnlocalized
	if sev == "" {
		sev = pgErr.Severity
	}
	return sev == "FATAL" || sev == "PANIC"
}

// Code returns the SQLSTATE of the first *pgconn.PgError in err's chain, or
// "" if there is none.
func Code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// SQLSTATEs the packages of this module tell apart.
const (
	SerializationFailure  = "40001"
	DeadlockDetected      = "40P01"
	UndefinedTable        = "42P01"
	InvalidSchemaName     = "3F000"
	InsufficientPrivilege = "42501"
	ReadOnlyTransaction   = "25006"
	InFailedTransaction   = "25P02"
	QueryCanceled         = "57014"
	LockNotAvailable      = "55P03"
)

// IsConflict reports whether err carries a serialization failure or a
// deadlock: the server rolled the transaction back, and running all of it
// again may succeed.
func IsConflict(err error) bool {
	c := Code(err)
	return c == SerializationFailure || c == DeadlockDetected
}

// IsMissingTable reports whether err says a table or schema does not exist.
func IsMissingTable(err error) bool {
	c := Code(err)
	return c == UndefinedTable || c == InvalidSchemaName
}

// NotSent marks err, from a step before the request was written (taking a
// connection from a pool, say), as provably not applied: [Classify] and
// pgconn.SafeToRetry report it so. err stays in the chain.
func NotSent(err error) error {
	if err == nil {
		return nil
	}
	return &notSentError{err}
}

type notSentError struct{ err error }

func (e *notSentError) Error() string     { return e.err.Error() }
func (e *notSentError) Unwrap() error     { return e.err }
func (e *notSentError) SafeToRetry() bool { return true }
