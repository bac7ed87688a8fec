package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/golib/lease/internal/applied"
	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/lease"
)

// classify turns an error from running one lease statement into an error
// that follows the rules of lease.Backend. Whether the statement was applied
// is pgplumbing.Classify's answer, shared with fence and leasequeue: not
// applied (nothing sent, no session, or refused by the server, which rolled
// the implicit transaction back) is a plain error, explained by its exact
// SQLSTATE (pgplumbing.ProblemOf), and one that no retry cures matches
// lease.ErrMisconfigured; unknown (no reply, or the session ended by FATAL
// or PANIC, possibly around the commit) matches lease.ErrIndeterminate.
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
		return connectError(err)
	case errors.As(err, &pgErr):
		return pgError(pgErr, err, table)
	}
	return fmt.Errorf("leasepostgres: request not sent: %w", err)
}

// migrateFn is the function that creates and upgrades the lease table.
const migrateFn = "leasepostgres.Migrate"

// pgError explains a server error by its exact SQLSTATE.
func pgError(pgErr *pgconn.PgError, err error, table string) error {
	if pgplumbing.IsConflict(err) {
		return fmt.Errorf("leasepostgres: statement rolled back, safe to retry: %w", err)
	}
	switch pgplumbing.ProblemOf(err) {
	case pgplumbing.MissingTable:
		return lease.Misconfigured(fmt.Errorf("leasepostgres: lease table %s not found (configuration: %s, or apply leasepostgres.Migrations; check Options.Schema and Options.Table): %w",
			table, pgplumbing.MigrateHint(migrateFn), err))
	case pgplumbing.MissingColumn:
		return lease.Misconfigured(fmt.Errorf("leasepostgres: lease table %s lacks a column this version of the package uses (configuration: the table predates its migrations; %s): %w",
			table, pgplumbing.MigrateHint(migrateFn), err))
	case pgplumbing.MissingFunction:
		return lease.Misconfigured(fmt.Errorf("leasepostgres: the server lacks a function or operator the lease statements call (configuration: PostgreSQL 12 or newer is needed): %w", err))
	case pgplumbing.MissingPrivilege:
		return lease.Misconfigured(fmt.Errorf("leasepostgres: permission denied on lease table %s (configuration: GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO the role, and USAGE on its schema): %w", table, table, err))
	case pgplumbing.PreparedStatementLost:
		return lease.Misconfigured(fmt.Errorf("leasepostgres: prepared statement lost between server sessions (configuration: %s): %w", pgplumbing.PoolerHint, err))
	case pgplumbing.Mismatch:
		return lease.Misconfigured(fmt.Errorf("leasepostgres: the server refused the statement on lease table %s (SQLSTATE %s): the table does not match this version of the package (configuration: %s): %w",
			table, pgErr.Code, pgplumbing.MigrateHint(migrateFn), err))
	case pgplumbing.LoginRefused:
		return lease.Misconfigured(fmt.Errorf("leasepostgres: login refused (configuration: %s): %w", pgplumbing.LoginHint, err))
	}
	switch pgErr.Code {
	case pgplumbing.InFailedTransaction:
		return fmt.Errorf("leasepostgres: the transaction given to leasepostgres.New has failed earlier: %w", err)
	case pgplumbing.ReadOnlyTransaction:
		return fmt.Errorf("leasepostgres: the database or transaction is read-only (configuration: connect to the primary): %w", err)
	}
	return fmt.Errorf("leasepostgres: statement failed, not applied: %w", err)
}

// connectError explains err, from opening a connection: nothing was sent.
// pgconn's text names the server's address; a refused login matches
// lease.ErrMisconfigured.
func connectError(err error) error {
	if pgplumbing.ProblemOf(err) == pgplumbing.LoginRefused {
		return lease.Misconfigured(fmt.Errorf("leasepostgres: login refused (configuration: %s): %w", pgplumbing.LoginHint, err))
	}
	return fmt.Errorf("leasepostgres: could not connect, request not sent: %w", err)
}

// notSent marks err as an error from before the request was sent: getting
// a connection from the pool failed. It names the server's address, which
// a pool that gave up waiting for a new connection does not.
func (s *Store) notSent(err error) error {
	var connErr *pgconn.ConnectError
	switch {
	case errors.As(err, &connErr):
		return connectError(pgplumbing.NotSent(err))
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("leasepostgres: no connection to %s before the context ended (is a PostgreSQL server listening there?), request not sent: %w", s.addr(), pgplumbing.NotSent(err))
	}
	return fmt.Errorf("leasepostgres: no connection to %s, request not sent: %w", s.addr(), pgplumbing.NotSent(err))
}
