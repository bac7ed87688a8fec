package leasequeue_test

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

// TestSourceErrorsSayWhetherApplied: the sources' errors match
// lease.ErrIndeterminate exactly when the request may have been applied. A
// FATAL error ended the session, possibly around the commit, whatever the
// server's lc_messages made of its Severity; a failed DNS lookup sent
// nothing. The real faults behind these errors are driven against real
// servers in internal/pgplumbing and internal/valkeyplumbing; this checks that the
// sources ask them.
func TestSourceErrorsSayWhetherApplied(t *testing.T) {
	fatal := &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}
	translated := &pgconn.PgError{Severity: "ВАЖНО", SeverityUnlocalized: "FATAL", Code: "57P01", Message: "закрытие подключения по команде администратора"}
	refused := &pgconn.PgError{Severity: "ОШИБКА", SeverityUnlocalized: "ERROR", Code: "23505"}
	dns := &net.DNSError{Err: "no such host", Name: "valkey.invalid", IsNotFound: true}
	for _, c := range []struct {
		name          string
		err           error
		indeterminate bool
	}{
		{"postgres statement, FATAL", leasequeue.PgError("finish", "1", fatal), true},
		{"postgres statement, translated FATAL", leasequeue.PgError("finish", "1", translated), true},
		{"postgres statement, translated ERROR", leasequeue.PgError("finish", "1", refused), false},
		{"postgres commit, FATAL", leasequeue.CommitError("1", fatal), true},
		{"postgres commit, translated FATAL", leasequeue.CommitError("1", translated), true},
		{"postgres commit, translated ERROR", leasequeue.CommitError("1", refused), false},
		{"valkey, DNS lookup failed", leasequeue.ValkeyError("defer", "1", fmt.Errorf("dial: %w", dns)), false},
	} {
		if got := errors.Is(c.err, lease.ErrIndeterminate); got != c.indeterminate {
			t.Errorf("%s: %v; indeterminate = %v, want %v", c.name, c.err, got, c.indeterminate)
		}
	}
}
