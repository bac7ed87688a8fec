// Package faults drives requests to real PostgreSQL and Valkey servers into
// real faults, for the tests of every package that classifies a store's
// errors: each [Fault] is one request under one fault and the outcome
// (applied, not applied, unknown) that the store's classifier, and every
// package wrapping it, must report for the error it returned. The same
// faults run through internal/pgplumbing and internal/valkeyplumbing and through
// the error wrappers of backends/postgres, backends/valkey, fence, cache
// and leasequeue, so no wrapper can drift from the store's answer.
//
// The faults: no fault; a context that ended before the request was sent,
// and one that ended after; a connection cut while the request was in
// flight; the server ending the session (FATAL from pg_terminate_backend,
// from idle_in_transaction_session_timeout before a COMMIT, from a fast
// shutdown; CLIENT KILL and SIGTERM on Valkey); refusals (a serialization
// failure at SERIALIZABLE, statement_timeout, the COMMIT of a failed
// transaction, WRONGTYPE, NOPERM also from a script, a script's error
// before its first write); failures to connect (a FATAL at connect, a
// refused connection, an unknown host); and the PostgreSQL ones again under
// lc_messages ru, where the Severity of a FATAL reads "ВАЖНО". Where the
// machine has no Russian locale, errors built with a translated Severity
// stand in for the localized rows, and the test log says so.
//
// Test binaries using it run through testserver.Main or MainLeakChecked.
package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/applied"
	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/internal/testkit/tcpproxy"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/valkeyplumbing"
	"github.com/golib/lease/lease"
)

// A Fault is one real request under one real fault, and the outcome the
// store's classifier must report for the error it returned.
type Fault struct {
	Name string
	// Want is the outcome the error must be classified as.
	Want applied.Outcome
	// Run makes the request under the fault and returns its error.
	Run func(t *testing.T) error
	// Check, if set, asserts that the fault happened as named (a FATAL
	// really was a FATAL), so a row cannot pass on another error.
	Check func(t *testing.T, err error)
}

// Drive runs every fault as a subtest of t and calls classify with the
// error of its request.
func Drive(t *testing.T, faults []Fault, classify func(t *testing.T, f Fault, err error)) {
	t.Helper()
	for _, f := range faults {
		t.Run(f.Name, func(t *testing.T) {
			err := f.Run(t)
			if f.Check != nil {
				f.Check(t, err)
			}
			classify(t, f, err)
		})
	}
}

// Marks returns a callback for Drive that asserts [WantMarked] for
// wrap(err), a package's error for the fault's error. On the rows without
// an error it only checks that wrap(nil) is nil.
func Marks(wrap func(err error) error) func(t *testing.T, f Fault, err error) {
	return func(t *testing.T, f Fault, err error) {
		t.Helper()
		WantMarked(t, f, err, wrap(err))
	}
}

// ErrorsOnly returns wrap for explainers that only see errors: a nil error
// stays nil without calling wrap.
func ErrorsOnly(wrap func(err error) error) func(err error) error {
	return func(err error) error {
		if err == nil {
			return nil
		}
		return wrap(err)
	}
}

// WantMarked asserts that wrapped, a package's error for the fault's error
// err, follows the error contract of this module for f.Want: nil when the
// request was applied, an error wrapping err otherwise, matching
// lease.ErrIndeterminate exactly when the outcome is unknown.
func WantMarked(t *testing.T, f Fault, err, wrapped error) {
	t.Helper()
	switch {
	case f.Want == applied.Yes && wrapped != nil:
		t.Fatalf("%v: got %v, want nil", err, wrapped)
	case f.Want == applied.Yes:
		return
	case wrapped == nil:
		t.Fatalf("%v: got nil, want an error (%v)", err, f.Want)
	case !errors.Is(wrapped, err):
		t.Fatalf("%v: got %v, which does not wrap it", err, wrapped)
	case errors.Is(wrapped, lease.ErrIndeterminate) != (f.Want == applied.Unknown):
		t.Fatalf("%v: got %v; matches lease.ErrIndeterminate %v, want %v (%v)",
			err, wrapped, errors.Is(wrapped, lease.ErrIndeterminate), f.Want == applied.Unknown, f.Want)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pgConn connects to dsn and closes the connection when t ends.
func pgConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	return pgConnWith(t, dsn, nil)
}

// pgConnWith is pgConn with the configuration changed by configure.
func pgConnWith(t *testing.T, dsn string, configure func(*pgx.ConnConfig)) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if configure != nil {
		configure(cfg)
	}
	c, err := pgx.ConnectConfig(ctxT(t), cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// whileRunning runs sql on c in a goroutine, calls fault once the server
// shows the statement running, and returns the statement's error.
func whileRunning(t *testing.T, dsn string, c *pgx.Conn, sql string, fault func(pid uint32)) error {
	t.Helper()
	ctx := ctxT(t)
	pid := c.PgConn().PID()
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, sql)
		done <- err
	}()
	admin := pgConn(t, dsn)
	for {
		var active bool
		if err := admin.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = $1 AND state = 'active'`, pid).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if active {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("%s ended before the fault: %v", sql, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	fault(pid)
	return <-done
}

func terminate(t *testing.T, dsn string) func(pid uint32) {
	return func(pid uint32) {
		var ok bool
		if err := pgConn(t, dsn).QueryRow(ctxT(t), `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
			t.Fatalf("pg_terminate_backend: %v, %v", ok, err)
		}
	}
}

// wantPgError asserts the error is a server error with code and the
// untranslated severity sev; translated, if set, is the Severity it must
// carry instead of sev.
func wantPgError(code, sev, translated string) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			t.Fatalf("%v is not a server error", err)
		}
		if pgErr.Code != code || pgErr.SeverityUnlocalized != sev {
			t.Fatalf("%v: code %s, severity %s; want %s, %s", err, pgErr.Code, pgErr.SeverityUnlocalized, code, sev)
		}
		if translated != "" && pgErr.Severity != translated {
			t.Fatalf("%v: Severity %q, want the translation %q", err, pgErr.Severity, translated)
		}
	}
}

// closeOnUnlocalizedFatal makes pgx close the connection on a FATAL by its
// untranslated severity, where pgx's default reads the translated one.
func closeOnUnlocalizedFatal(cfg *pgx.ConnConfig) {
	cfg.OnPgError = func(_ *pgconn.PgConn, pgErr *pgconn.PgError) bool {
		return !pgplumbing.SessionEnded(pgErr)
	}
}

// russian sets lc_messages on c to a Russian locale and reports whether the
// server has one; PostgreSQL needs the operating system's locale too.
func russian(t *testing.T, c *pgx.Conn) bool {
	_, err := c.Exec(ctxT(t), `SET lc_messages = 'ru_RU.UTF-8'`)
	return err == nil
}

// Postgres returns the PostgreSQL faults, on a database of the shared test
// server (and a dedicated server for the shutdown).
func Postgres(t *testing.T) []Fault {
	dsn := testserver.Postgres(t).NewDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	viaProxy := func(t *testing.T) (string, *tcpproxy.Proxy) {
		p := tcpproxy.Start(t, u.Host)
		v := *u
		v.Host = p.Addr()
		return v.String(), p
	}
	localized := russian(t, pgConn(t, dsn))
	if !localized {
		t.Log("no Russian locale on this machine (locale -a): the localized rows use errors built with a translated Severity")
	}
	fs := []Fault{
		{Name: "no fault", Want: applied.Yes, Run: func(t *testing.T) error {
			_, err := pgConn(t, dsn).Exec(ctxT(t), `SELECT 1`)
			return err
		}},
		{Name: "context ended before the request was sent", Want: applied.No, Run: func(t *testing.T) error {
			c := pgConn(t, dsn)
			ctx, cancel := context.WithCancel(ctxT(t))
			cancel()
			_, err := c.Exec(ctx, `SELECT 1`)
			return err
		}},
		{Name: "context ended after the request was sent", Want: applied.Unknown, Run: func(t *testing.T) error {
			// Connect first: under load, connecting can take longer
			// than the deadline, and then nothing is sent at all.
			c := pgConn(t, dsn)
			ctx, cancel := context.WithTimeout(ctxT(t), 200*time.Millisecond)
			defer cancel()
			_, err := c.Exec(ctx, `SELECT pg_sleep(30)`)
			return err
		}},
		{Name: "connection reset while the request is in flight", Want: applied.Unknown, Run: func(t *testing.T) error {
			pdsn, p := viaProxy(t)
			return whileRunning(t, dsn, pgConn(t, pdsn), `SELECT pg_sleep(30)`, func(uint32) { p.Cut() })
		}},
		{Name: "FATAL: the session is terminated mid-statement (admin shutdown, pg_terminate_backend)", Want: applied.Unknown,
			Check: wantPgError("57P01", "FATAL", ""), Run: func(t *testing.T) error {
				return whileRunning(t, dsn, pgConn(t, dsn), `SELECT pg_sleep(30)`, terminate(t, dsn))
			}},
		{Name: "FATAL: idle_in_transaction_session_timeout, then COMMIT", Want: applied.Unknown, Run: func(t *testing.T) error {
			return idleThenCommit(t, pgConn(t, dsn))
		}},
		{Name: "FATAL at connect: the database does not exist", Want: applied.No, Run: func(t *testing.T) error {
			v := *u
			v.Path = "/no_such_database"
			c, err := pgx.Connect(ctxT(t), v.String())
			if err == nil {
				_ = c.Close(context.Background())
			}
			return err
		}, Check: wantPgError("3D000", "FATAL", "")},
		{Name: "connection refused", Want: applied.No, Run: func(t *testing.T) error {
			_, err := pgx.Connect(ctxT(t), "postgres://postgres@"+closedPort(t)+"/postgres?connect_timeout=5")
			return err
		}},
		{Name: "statement_timeout", Want: applied.No, Check: wantPgError("57014", "ERROR", ""), Run: func(t *testing.T) error {
			return statementTimeout(t, pgConn(t, dsn))
		}},
		{Name: "serialization failure at SERIALIZABLE", Want: applied.No, Check: wantPgError("40001", "ERROR", ""), Run: func(t *testing.T) error {
			return serializationFailure(t, dsn)
		}},
		{Name: "COMMIT of a transaction that had failed", Want: applied.No, Run: func(t *testing.T) error {
			c := pgConn(t, dsn)
			ctx := ctxT(t)
			tx, err := c.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = tx.Exec(ctx, `SELECT 1/0`)
			err = tx.Commit(ctx)
			if !errors.Is(err, pgx.ErrTxCommitRollback) {
				t.Fatalf("commit = %v, want pgx.ErrTxCommitRollback", err)
			}
			return err
		}},
		{Name: "admin shutdown of the server (fast shutdown) mid-statement", Want: applied.Unknown, Run: func(t *testing.T) error {
			s := testserver.StartPostgres(t)
			sdsn := s.NewDatabase(t)
			return whileRunning(t, sdsn, pgConn(t, sdsn), `SELECT pg_sleep(30)`, func(uint32) { s.Stop() })
		}},
	}
	if localized {
		fs = append(fs,
			// pgx's default OnPgError closes the connection on a FATAL
			// by the translated Severity, so with lc_messages ru it waits
			// for more and reports the closed connection instead.
			Fault{Name: "localized FATAL: lc_messages ru, session terminated mid-statement (pgx's default OnPgError)", Want: applied.Unknown,
				Run: func(t *testing.T) error {
					c := pgConn(t, dsn)
					russian(t, c)
					return whileRunning(t, dsn, c, `SELECT pg_sleep(30)`, terminate(t, dsn))
				}},
			// With an OnPgError that reads SeverityUnlocalized the FATAL
			// itself arrives, its Severity translated.
			Fault{Name: "localized FATAL: lc_messages ru, session terminated mid-statement", Want: applied.Unknown,
				Check: wantPgError("57P01", "FATAL", "ВАЖНО"), Run: func(t *testing.T) error {
					c := pgConnWith(t, dsn, closeOnUnlocalizedFatal)
					russian(t, c)
					return whileRunning(t, dsn, c, `SELECT pg_sleep(30)`, terminate(t, dsn))
				}},
			Fault{Name: "localized ERROR: lc_messages ru, statement_timeout", Want: applied.No,
				Check: wantPgError("57014", "ERROR", "ОШИБКА"), Run: func(t *testing.T) error {
					c := pgConn(t, dsn)
					russian(t, c)
					return statementTimeout(t, c)
				}},
			Fault{Name: "localized FATAL: lc_messages ru, idle_in_transaction_session_timeout, then COMMIT", Want: applied.Unknown,
				Run: func(t *testing.T) error {
					c := pgConnWith(t, dsn, closeOnUnlocalizedFatal)
					russian(t, c)
					return idleThenCommit(t, c)
				}},
		)
	} else {
		fs = append(fs,
			Fault{Name: "localized FATAL (built: translated Severity, untranslated SeverityUnlocalized)", Want: applied.Unknown,
				Run: func(*testing.T) error {
					return fmt.Errorf("commit: %w", &pgconn.PgError{Severity: "ВАЖНО", SeverityUnlocalized: "FATAL", Code: "57P01"})
				}},
			Fault{Name: "localized ERROR (built: translated Severity, untranslated SeverityUnlocalized)", Want: applied.No,
				Run: func(*testing.T) error {
					return fmt.Errorf("commit: %w", &pgconn.PgError{Severity: "ОШИБКА", SeverityUnlocalized: "ERROR", Code: "57014"})
				}},
		)
	}
	return fs
}

// idleThenCommit begins a transaction on c that the server ends with a
// FATAL for idling (idle_in_transaction_session_timeout), and returns the
// error of its COMMIT.
func idleThenCommit(t *testing.T, c *pgx.Conn) error {
	ctx := ctxT(t)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL idle_in_transaction_session_timeout = '50ms'`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	return tx.Commit(ctx)
}

// statementTimeout returns the error of a statement on c that runs past
// its statement_timeout.
func statementTimeout(t *testing.T, c *pgx.Conn) error {
	if _, err := c.Exec(ctxT(t), `SET statement_timeout = '100ms'`); err != nil {
		t.Fatal(err)
	}
	_, err := c.Exec(ctxT(t), `SELECT pg_sleep(30)`)
	return err
}

// serializationFailure runs two SERIALIZABLE transactions with a write
// skew and returns the error of the one the server rolls back.
func serializationFailure(t *testing.T, dsn string) error {
	ctx := ctxT(t)
	a, b := pgConn(t, dsn), pgConn(t, dsn)
	if _, err := a.Exec(ctx, `CREATE TABLE IF NOT EXISTS skew (n int)`); err != nil {
		t.Fatal(err)
	}
	opts := pgx.TxOptions{IsoLevel: pgx.Serializable}
	ta, err := a.BeginTx(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ta.Rollback(ctx) }()
	tb, err := b.BeginTx(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tb.Rollback(ctx) }()
	for _, tx := range []pgx.Tx{ta, tb} {
		if _, err := tx.Exec(ctx, `INSERT INTO skew SELECT count(*) FROM skew`); err != nil {
			t.Fatal(err)
		}
	}
	if err := ta.Commit(ctx); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	return tb.Commit(ctx)
}

// closedPort returns a loopback address nobody listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// ValkeyClient returns a valkey-go client of the server at addr, closed
// when t ends.
func ValkeyClient(t *testing.T, addr string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// blocked runs BLPOP on a key nobody pushes to, calls fault once the
// server shows it blocked, and returns its error.
func blocked(t *testing.T, admin, c valkey.Client, fault func(id int64)) error {
	t.Helper()
	ctx := ctxT(t)
	key := fmt.Sprintf("applied-test:%s:%d", t.Name(), time.Now().UnixNano())
	done := make(chan error, 1)
	go func() {
		done <- c.Do(ctx, c.B().Blpop().Key(key).Timeout(30).Build()).Error()
	}()
	for {
		list, err := admin.Do(ctx, admin.B().ClientList().Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(list, "\n") {
			if strings.Contains(line, "cmd=blpop") {
				var id int64
				_, _ = fmt.Sscanf(line, "id=%d", &id)
				fault(id)
				return <-done
			}
		}
		select {
		case err := <-done:
			t.Fatalf("BLPOP ended before the fault: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Valkey returns the Valkey faults, on the shared test server (and
// dedicated servers for the shutdown and the ACL rows).
func Valkey(t *testing.T) []Fault {
	addr := testserver.Valkey(t).Addr()
	key := func(t *testing.T) string { return fmt.Sprintf("applied-test:%s", t.Name()) }
	fs := []Fault{
		{Name: "no fault", Want: applied.Yes, Run: func(t *testing.T) error {
			c := ValkeyClient(t, addr)
			return c.Do(ctxT(t), c.B().Set().Key(key(t)).Value("v").Build()).Error()
		}},
		{Name: "context ended before the request was sent (valkey-go cannot tell)", Want: applied.Unknown, Run: func(t *testing.T) error {
			c := ValkeyClient(t, addr)
			ctx, cancel := context.WithCancel(ctxT(t))
			cancel()
			return c.Do(ctx, c.B().Set().Key(key(t)).Value("v").Build()).Error()
		}},
		{Name: "context ended after the request was sent", Want: applied.Unknown, Run: func(t *testing.T) error {
			c := ValkeyClient(t, addr)
			ctx, cancel := context.WithTimeout(ctxT(t), 200*time.Millisecond)
			defer cancel()
			return c.Do(ctx, c.B().Blpop().Key(key(t)).Timeout(30).Build()).Error()
		}},
		{Name: "connection reset while the request is in flight", Want: applied.Unknown, Run: func(t *testing.T) error {
			p := tcpproxy.Start(t, addr)
			return blocked(t, ValkeyClient(t, addr), ValkeyClient(t, p.Addr()), func(int64) { p.Cut() })
		}},
		{Name: "admin shutdown of the connection (CLIENT KILL) mid-request", Want: applied.Unknown, Run: func(t *testing.T) error {
			admin := ValkeyClient(t, addr)
			return blocked(t, admin, ValkeyClient(t, addr), func(id int64) {
				if err := admin.Do(ctxT(t), admin.B().ClientKill().Id(id).Build()).Error(); err != nil {
					t.Fatal(err)
				}
			})
		}},
		{Name: "admin shutdown of the server (SIGTERM) mid-request", Want: applied.Unknown, Run: func(t *testing.T) error {
			s := testserver.StartValkey(t, testserver.ValkeyOptions{})
			return blocked(t, ValkeyClient(t, s.Addr()), ValkeyClient(t, s.Addr()), func(int64) { s.Stop() })
		}},
		{Name: "refused: WRONGTYPE", Want: applied.No, Run: func(t *testing.T) error {
			c := ValkeyClient(t, addr)
			ctx := ctxT(t)
			if err := c.Do(ctx, c.B().Set().Key(key(t)).Value("v").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			return c.Do(ctx, c.B().Hset().Key(key(t)).FieldValue().FieldValue("f", "v").Build()).Error()
		}, Check: func(t *testing.T, err error) {
			if !valkeyplumbing.WrongType(err) || valkeyplumbing.NoPermission(err) {
				t.Fatalf("%v: WrongType %v, NoPermission %v", err, valkeyplumbing.WrongType(err), valkeyplumbing.NoPermission(err))
			}
		}},
		{Name: "refused: a script's error before its first write", Want: applied.No, Run: func(t *testing.T) error {
			c := ValkeyClient(t, addr)
			return c.Do(ctxT(t), c.B().Eval().Script(`return redis.error_reply('ERR refused before writing')`).Numkeys(0).Build()).Error()
		}},
		{Name: "refused: NOPERM for a command", Want: applied.No, Run: func(t *testing.T) error {
			return withLimitedUser(t, func(c valkey.Client) error {
				return c.Do(ctxT(t), c.B().Set().Key("k").Value("v").Build()).Error()
			})
		}, Check: wantNoPermission},
		{Name: "refused: NOPERM for a command a script calls", Want: applied.No, Run: func(t *testing.T) error {
			return withLimitedUser(t, func(c valkey.Client) error {
				return c.Do(ctxT(t), c.B().Eval().Script(`return redis.call('SET', KEYS[1], 'v')`).Numkeys(1).Key("k").Build()).Error()
			})
		}, Check: wantNoPermission},
		{Name: "refused: WRONGPASS after the password changed", Want: applied.No, Run: func(t *testing.T) error {
			return withLimitedUser(t, func(c valkey.Client) error {
				admin := ValkeyClient(t, limitedAddr(c))
				ctx := ctxT(t)
				if err := admin.Do(ctx, admin.B().AclSetuser().Username("limited").Rule("resetpass", ">changed").Build()).Error(); err != nil {
					t.Fatal(err)
				}
				if err := admin.Do(ctx, admin.B().ClientKill().User("limited").Build()).Error(); err != nil {
					t.Fatal(err)
				}
				var err error
				for range 3 { // the first command may find the old connection closed
					if err = c.Do(ctx, c.B().Get().Key("k").Build()).Error(); valkeyplumbing.Classify(err) != applied.Unknown {
						break
					}
				}
				return err
			})
		}, Check: func(t *testing.T, err error) {
			if !valkeyplumbing.LoginRefused(err) || !valkeyplumbing.Misconfigured(err) {
				t.Fatalf("%v: LoginRefused %v, Misconfigured %v", err, valkeyplumbing.LoginRefused(err), valkeyplumbing.Misconfigured(err))
			}
		}},
		{Name: "connection refused", Want: applied.No, Run: func(t *testing.T) error {
			_, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{closedPort(t)}, DisableCache: true})
			return err
		}},
		{Name: "no such host", Want: applied.No, Run: func(t *testing.T) error {
			_, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{"lease-test.invalid:6379"}, DisableCache: true})
			return err
		}, Check: func(t *testing.T, err error) {
			var dns *net.DNSError
			if !errors.As(err, &dns) {
				t.Fatalf("%v is not a DNS error", err)
			}
		}},
	}
	return fs
}

// withLimitedUser runs fn with a client of a dedicated server whose user
// may run EVAL and GET but not SET.
func withLimitedUser(t *testing.T, fn func(valkey.Client) error) error {
	s := testserver.StartValkey(t, testserver.ValkeyOptions{})
	admin := ValkeyClient(t, s.Addr())
	if err := admin.Do(ctxT(t), admin.B().AclSetuser().Username("limited").Rule("on", ">pw", "~*", "+@connection", "+eval", "+get").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{s.Addr()}, Username: "limited", Password: "pw", DisableCache: true})
	if err != nil {
		t.Fatalf("client of the limited user: %v", err)
	}
	defer c.Close()
	return fn(c)
}

func wantNoPermission(t *testing.T, err error) {
	t.Helper()
	if !valkeyplumbing.NoPermission(err) || !valkeyplumbing.Misconfigured(err) {
		t.Fatalf("%v: NoPermission %v, Misconfigured %v", err, valkeyplumbing.NoPermission(err), valkeyplumbing.Misconfigured(err))
	}
}

// limitedAddr returns the address of the one server c talks to.
func limitedAddr(c valkey.Client) string {
	for addr := range c.Nodes() {
		return addr
	}
	return ""
}
