package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/golib/lease/lease"
	"github.com/jackc/pgx/v5/pgconn"
)

// classify turns an error from running one lease statement into an error
// that follows the rules of lease.Backend:
//
//   - an error that pgconn guarantees happened before anything was sent
//     (pgconn.SafeToRetry), or a failure to connect, is a plain error: the
//     request was not applied;
//   - an error reported by the server (*pgconn.PgError) is a plain error
//     too: the statement failed and its implicit transaction rolled back.
//     Serialization failures and deadlocks say they can be retried;
//     missing tables and permissions read as configuration errors. A FATAL
//     or PANIC error ends the session, possibly around the commit, so it is
//     indeterminate;
//   - anything else (a timeout, a cancelled context, a connection lost
//     after sending) is indeterminate: the statement may have committed.
//
// The messages name the table but never the statement's arguments, so the
// acquisition's nonce never reaches an error.
func classify(err error, table string) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	switch {
	case errors.As(err, &pgErr):
		if sev := pgErr.SeverityUnlocalized; sev == "FATAL" || sev == "PANIC" ||
			sev == "" && (pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC") {
			return lease.Indeterminate(fmt.Errorf("leasepostgres: session ended: %w", err))
		}
		return pgError(pgErr, err, table)
	case pgconn.SafeToRetry(err):
		return fmt.Errorf("leasepostgres: request not sent: %w", err)
	case errors.As(err, &connErr):
		return fmt.Errorf("leasepostgres: %w", err)
	}
	return lease.Indeterminate(fmt.Errorf("leasepostgres: no reply: %w", err))
}

// pgError explains a server error, by SQLSTATE class.
func pgError(pgErr *pgconn.PgError, err error, table string) error {
	code := pgErr.Code
	switch {
	case code == "40001" || code == "40P01":
		return fmt.Errorf("leasepostgres: statement rolled back, safe to retry: %w", err)
	case code == "42P01" || code == "3F000":
		return fmt.Errorf("leasepostgres: lease table %s not found (configuration: run leasepostgres.Migrate or apply leasepostgres.Migrations, and check Options.Schema and Options.Table): %w", table, err)
	case code == "42501":
		return fmt.Errorf("leasepostgres: permission denied on lease table %s (configuration: grant SELECT, INSERT, UPDATE on it to the role): %w", table, err)
	case strings.HasPrefix(code, "42"):
		return fmt.Errorf("leasepostgres: lease table %s does not match this version of the library (configuration: run leasepostgres.Migrate): %w", table, err)
	case code == "25P02":
		return fmt.Errorf("leasepostgres: the transaction given to leasepostgres.New has failed earlier: %w", err)
	case code == "25006":
		return fmt.Errorf("leasepostgres: the database or transaction is read-only (configuration: connect to the primary): %w", err)
	}
	return fmt.Errorf("leasepostgres: statement failed, not applied: %w", err)
}

// notSent marks err as an error from before the request was sent: getting
// a connection from the pool failed.
func notSent(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("leasepostgres: no connection before the context ended, request not sent: %w", err)
	}
	return fmt.Errorf("leasepostgres: no connection, request not sent: %w", err)
}
