package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/golib/lease/lease"
	"github.com/jackc/pgx/v5/pgconn"
)

// unsent is an error that pgconn.SafeToRetry recognises.
type unsent struct{}

func (unsent) Error() string     { return "write failed before any byte was sent" }
func (unsent) SafeToRetry() bool { return true }

func TestClassify(t *testing.T) {
	const table = `"public"."leases"`
	for _, c := range []struct {
		name          string
		err           error
		indeterminate bool
		misconfigured bool
		mention       string
	}{
		{"not sent", fmt.Errorf("wrapped: %w", unsent{}), false, false, "not sent"},
		{"serialization failure", &pgconn.PgError{Severity: "ERROR", Code: "40001", Message: "could not serialize access"}, false, false, "safe to retry"},
		{"deadlock", &pgconn.PgError{Severity: "ERROR", Code: "40P01", Message: "deadlock detected"}, false, false, "safe to retry"},
		{"missing table", &pgconn.PgError{Severity: "ERROR", Code: "42P01"}, false, true, "run `leasectl migrate`, or leasepostgres.Migrate"},
		{"missing schema", &pgconn.PgError{Severity: "ERROR", Code: "3F000"}, false, true, "leasectl migrate"},
		{"missing column", &pgconn.PgError{Severity: "ERROR", Code: "42703"}, false, true, "lacks a column this version"},
		{"missing function", &pgconn.PgError{Severity: "ERROR", Code: "42883"}, false, true, "PostgreSQL 12 or newer"},
		{"permission", &pgconn.PgError{Severity: "ERROR", Code: "42501"}, false, true, "GRANT SELECT, INSERT, UPDATE, DELETE ON " + table},
		{"prepared statement exists", &pgconn.PgError{Severity: "ERROR", Code: "42P05"}, false, true, "default_query_exec_mode=exec"},
		{"prepared statement missing", &pgconn.PgError{Severity: "ERROR", Code: "26000"}, false, true, "connection pooler in transaction mode"},
		{"other class 42", &pgconn.PgError{Severity: "ERROR", Code: "42804"}, false, true, "SQLSTATE 42804"},
		{"read only", &pgconn.PgError{Severity: "ERROR", Code: "25006"}, false, false, "primary"},
		{"statement timeout", &pgconn.PgError{Severity: "ERROR", Code: "57014"}, false, false, "not applied"},
		{"terminated", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01"}, true, false, "session ended"},
		{"panic", &pgconn.PgError{Severity: "PANIC", Code: "XX000"}, true, false, "session ended"},
		{"deadline", fmt.Errorf("timeout: %w", context.DeadlineExceeded), true, false, "no reply"},
		{"connection lost", fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF), true, false, "no reply"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := classify(c.err, table)
			if got := errors.Is(err, lease.ErrIndeterminate); got != c.indeterminate {
				t.Errorf("classify(%v) = %v: indeterminate %v, want %v", c.err, err, got, c.indeterminate)
			}
			if got := errors.Is(err, lease.ErrMisconfigured); got != c.misconfigured {
				t.Errorf("classify(%v) = %v: misconfigured %v, want %v", c.err, err, got, c.misconfigured)
			}
			if !errors.Is(err, c.err) {
				t.Errorf("classify(%v) = %v does not wrap the cause", c.err, err)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Errorf("classify(%v) = %v, want it to mention %q", c.err, err, c.mention)
			}
		})
	}
	if classify(nil, table) != nil {
		t.Error("classify(nil) is not nil")
	}
}

func TestNotSent(t *testing.T) {
	s := &Store{}
	err := s.notSent(context.DeadlineExceeded)
	if errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "the database server") {
		t.Fatalf("notSent(DeadlineExceeded) = %v, want a plain error naming the address", err)
	}
}

func TestRenderReplacesOnlyTheTable(t *testing.T) {
	for _, name := range []string{"acquire", "renew", "release", "inspect", "guard", "watch", "permit", "setacquire", "setrenew", "setrelease"} {
		q := loadQuery(name, names{schema: "s", table: "t", qualified: `"s"."t"`})
		if strings.Contains(q, "leases") || strings.Contains(q, "public") {
			t.Errorf("%s still names the default table:\n%s", name, q)
		}
		if strings.Count(q, ";") > 0 {
			t.Errorf("%s has a semicolon; want exactly one statement:\n%s", name, q)
		}
	}
	if got := channelName(`"public"."leases"`); len(got) > 63 {
		t.Errorf("channel name %q is longer than 63 bytes", got)
	}
}
