package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/golib/lease/internal/applied"
	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/lease"
)

// classify turns an error from running one lease statement into an error
// that follows the rules of lease.Backend. Whether the statement was applied
// is pgplumbing.Classify's answer, shared with fence and leasequeue: not
// applied (nothing sent, no session, or refused by the server, which rolled
// the implicit transaction back) is a plain error, explained by SQLSTATE;
// unknown (no reply, or the session ended by FATAL or PANIC, possibly around
// the commit) matches lease.ErrIndeterminate.
//
// The messages name the table but never the statement's arguments, so the
// acquisition's nonce never reaches an error.
func classify(err error, table string) error {
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	switch out := pgplumbing.Classify(err); {
	case out == applied.Yes:
		return nil
	case out == applied.Unknown && errors.As(err, &pgErr):
		return lease.Indeterminate(fmt.Errorf("leasepostgres: session ended: %w", err))
	case out == applied.Unknown:
		return lease.Indeterminate(fmt.Errorf("leasepostgres: no reply: %w", err))
	case errors.As(err, &connErr):
		return fmt.Errorf("leasepostgres: %w", err)
	case errors.As(err, &pgErr):
		return pgError(pgErr, err, table)
	}
	return fmt.Errorf("leasepostgres: request not sent: %w", err)
}

// pgError explains a server error, by SQLSTATE class.
func pgError(pgErr *pgconn.PgError, err error, table string) error {
	code := pgErr.Code
	switch {
	case pgplumbing.IsConflict(err):
		return fmt.Errorf("leasepostgres: statement rolled back, safe to retry: %w", err)
	case pgplumbing.IsMissingTable(err):
		return fmt.Errorf("leasepostgres: lease table %s not found (configuration: run leasepostgres.Migrate or apply leasepostgres.Migrations, and check Options.Schema and Options.Table): %w", table, err)
	case code == pgplumbing.InsufficientPrivilege:
		return fmt.Errorf("leasepostgres: permission denied on lease table %s (configuration: grant SELECT, INSERT, UPDATE, DELETE on it to the role): %w", table, err)
	case strings.HasPrefix(code, "42"):
		return fmt.Errorf("leasepostgres: lease table %s does not match this version of the library (configuration: run leasepostgres.Migrate): %w", table, err)
	case code == pgplumbing.InFailedTransaction:
		return fmt.Errorf("leasepostgres: the transaction given to leasepostgres.New has failed earlier: %w", err)
	case code == pgplumbing.ReadOnlyTransaction:
		return fmt.Errorf("leasepostgres: the database or transaction is read-only (configuration: connect to the primary): %w", err)
	}
	return fmt.Errorf("leasepostgres: statement failed, not applied: %w", err)
}

// notSent marks err as an error from before the request was sent: getting
// a connection from the pool failed.
func notSent(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("leasepostgres: no connection before the context ended, request not sent: %w", pgplumbing.NotSent(err))
	}
	return fmt.Errorf("leasepostgres: no connection, request not sent: %w", pgplumbing.NotSent(err))
}
