package pgplumbing_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/golib/lease/internal/pgplumbing"
)

// TestProblemOf classifies by the exact SQLSTATE, never by its class
// alone: a prepared statement lost to a pooler (42P05, of class 42) is not
// a table to migrate.
func TestProblemOf(t *testing.T) {
	for code, want := range map[string]pgplumbing.Problem{
		"42P01": pgplumbing.MissingTable,
		"3F000": pgplumbing.MissingTable,
		"42703": pgplumbing.MissingColumn,
		"42883": pgplumbing.MissingFunction,
		"42501": pgplumbing.MissingPrivilege,
		"42P05": pgplumbing.PreparedStatementLost,
		"26000": pgplumbing.PreparedStatementLost,
		"28P01": pgplumbing.LoginRefused,
		"28000": pgplumbing.LoginRefused,
		"3D000": pgplumbing.LoginRefused,
		"42804": pgplumbing.Mismatch,
		"42601": pgplumbing.Mismatch,
		"40001": pgplumbing.NoProblem,
		"23505": pgplumbing.NoProblem,
		"57014": pgplumbing.NoProblem,
		"":      pgplumbing.NoProblem,
	} {
		var err error
		if code != "" {
			err = fmt.Errorf("wrapped: %w", &pgconn.PgError{Severity: "ERROR", Code: code})
		}
		if got := pgplumbing.ProblemOf(err); got != want {
			t.Errorf("ProblemOf(SQLSTATE %q) = %v, want %v", code, got, want)
		}
		if hint := want.Hint("pkg.Migrate", "SELECT ON t"); (hint == "") != (want == pgplumbing.NoProblem) {
			t.Errorf("Hint of %v = %q", want, hint)
		}
	}
	if h := pgplumbing.PreparedStatementLost.Hint("pkg.Migrate", ""); h != pgplumbing.PoolerHint {
		t.Errorf("PreparedStatementLost.Hint = %q, want PoolerHint", h)
	}
}

func TestAddr(t *testing.T) {
	cfg, err := pgconn.ParseConfig("postgres://u@db1:5433,db2/x")
	if err != nil {
		t.Fatal(err)
	}
	if got := pgplumbing.Addr(cfg); got != "db1:5433,db2:5432" {
		t.Errorf("Addr = %q, want db1:5433,db2:5432", got)
	}
	if got := pgplumbing.Addr(&pgconn.Config{Host: "/run/postgresql", Port: 5432}); got != "/run/postgresql (Unix socket, port 5432)" {
		t.Errorf("Addr of a socket = %q", got)
	}
}
