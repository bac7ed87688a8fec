package pgplumbing

import (
	"errors"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Problem is what a refused statement, or a refused login, says is wrong
// with the setup, read from its exact SQLSTATE. Every Problem but
// NoProblem is permanent: the same request fails the same way until an
// operator changes something, so no retry can cure it.
type Problem int

const (
	// NoProblem: the error says nothing about the setup (a constraint, a
	// conflict, a cancelled statement, a lost connection, no error).
	NoProblem Problem = iota
	// MissingTable: 42P01 undefined_table, or 3F000 invalid_schema_name.
	MissingTable
	// MissingColumn: 42703 undefined_column. The table predates the
	// package's latest migrations.
	MissingColumn
	// MissingFunction: 42883 undefined_function. The server lacks a
	// function or operator the statements call: an older PostgreSQL than
	// the package supports.
	MissingFunction
	// MissingPrivilege: 42501 insufficient_privilege.
	MissingPrivilege
	// PreparedStatementLost: 42P05 duplicate_prepared_statement or 26000
	// invalid_sql_statement_name. A prepared statement of the connection
	// exists on a server session it did not prepare it on, or is missing
	// on the one it runs on: a connection pooler in transaction mode hands
	// one client connection different server sessions. See PoolerHint.
	PreparedStatementLost
	// Mismatch: any other error of class 42 (syntax error or access rule
	// violation): the statement does not fit the table it names.
	Mismatch
	// LoginRefused: 28P01 invalid_password, 28000
	// invalid_authorization_specification (no such role, or pg_hba.conf
	// refuses it) or 3D000 invalid_catalog_name (no such database).
	LoginRefused
)

// SQLSTATEs that Problem tells apart, besides those of outcome.go.
const (
	UndefinedColumn                   = "42703"
	UndefinedFunction                 = "42883"
	DuplicatePreparedStatement        = "42P05"
	InvalidSQLStatementName           = "26000"
	InvalidPassword                   = "28P01"
	InvalidAuthorizationSpecification = "28000"
	InvalidCatalogName                = "3D000"
)

// ProblemOf returns what err says is wrong with the setup: the Problem of
// the SQLSTATE of the first *pgconn.PgError in its chain (a
// *pgconn.ConnectError keeps the server's refusal in its chain).
func ProblemOf(err error) Problem {
	switch c := Code(err); {
	case c == UndefinedTable || c == InvalidSchemaName:
		return MissingTable
	case c == UndefinedColumn:
		return MissingColumn
	case c == UndefinedFunction:
		return MissingFunction
	case c == InsufficientPrivilege:
		return MissingPrivilege
	case c == DuplicatePreparedStatement || c == InvalidSQLStatementName:
		return PreparedStatementLost
	case c == InvalidPassword || c == InvalidAuthorizationSpecification || c == InvalidCatalogName:
		return LoginRefused
	case strings.HasPrefix(c, "42"):
		return Mismatch
	}
	return NoProblem
}

// PoolerHint is the advice for PreparedStatementLost, the same in every
// package's errors.
const PoolerHint = "a connection pooler in transaction mode (PgBouncer, say) keeps no prepared statement " +
	"across transactions: set default_query_exec_mode=exec in the connection string (pgx.QueryExecModeExec, " +
	"or the simple protocol), or use a pooler that tracks them (PgBouncer 1.21+ with max_prepared_statements)"

// LoginHint is the advice for LoginRefused.
const LoginHint = "check the user, the password and the database name of the connection settings"

// MigrateHint returns the advice for tables that are missing or older than
// the package: what an operator runs, and fn, the Go function that a
// program calls ("leasepostgres.Migrate").
func MigrateHint(fn string) string {
	return "run `leasectl migrate`, or " + fn + " from the program"
}

// Addr returns where a connection of cfg goes, for errors: host:port of
// the first host, followed by those of its fallbacks ("a:5432,b:5432").
// A Unix socket's directory is shown with its port.
func Addr(cfg *pgconn.Config) string {
	if cfg == nil {
		return ""
	}
	addrs := []string{hostPort(cfg.Host, cfg.Port)}
	for _, f := range cfg.Fallbacks {
		if a := hostPort(f.Host, f.Port); a != addrs[len(addrs)-1] {
			addrs = append(addrs, a)
		}
	}
	return strings.Join(addrs, ",")
}

func hostPort(host string, port uint16) string {
	if strings.HasPrefix(host, "/") {
		return host + " (Unix socket, port " + strconv.Itoa(int(port)) + ")"
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// IsTimeout reports whether err is a context's end or a network timeout:
// no answer came in time.
func IsTimeout(err error) bool {
	var ne net.Error
	return pgconn.Timeout(err) || errors.As(err, &ne) && ne.Timeout()
}

// Hint returns what to change for p, in the words every package shares:
// fn is the Go function that creates and upgrades the package's tables
// ("fencepostgres.Migrate"), and grants the privileges its statements need
// ("SELECT, INSERT, UPDATE, DELETE ON the fences table"). It returns ""
// for NoProblem.
func (p Problem) Hint(fn, grants string) string {
	switch p {
	case MissingTable:
		return "the table is missing: " + MigrateHint(fn) + ", and check the schema and table names"
	case MissingColumn, Mismatch:
		return "the table is older than this version of the package: " + MigrateHint(fn)
	case MissingFunction:
		return "the server lacks a function or operator the statements call: PostgreSQL 12 or newer is needed"
	case MissingPrivilege:
		return "GRANT " + grants + " TO the role, and USAGE on the schema"
	case PreparedStatementLost:
		return PoolerHint
	case LoginRefused:
		return LoginHint
	}
	return ""
}
