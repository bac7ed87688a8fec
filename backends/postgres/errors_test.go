package postgres_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// secretNonce is a nonce that must never show up in an error.
const secretNonce = "SECRET-NONCE-d41d8cd98f00b204"

// checkConfigError checks that err is a plain error (nothing applied)
// that mentions hint and not the nonce.
func checkConfigError(t *testing.T, what string, err error, hint string) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("%s: no error", what)
	case errors.Is(err, lease.ErrIndeterminate):
		t.Errorf("%s: %v is indeterminate, want a plain error", what, err)
	case !errors.Is(err, lease.ErrMisconfigured) && hint != "failed earlier":
		t.Errorf("%s: %v does not match lease.ErrMisconfigured", what, err)
	case !strings.Contains(err.Error(), hint):
		t.Errorf("%s: %v does not mention %q", what, err, hint)
	case strings.Contains(err.Error(), secretNonce):
		t.Errorf("%s: %v contains the nonce", what, err)
	}
}

func TestMissingTableIsAConfigurationError(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDatabase(t), nil)
	s, err := leasepostgres.New(pool, leasepostgres.Options{Table: "never_migrated"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ctxT(t)
	a := lease.Acquisition{Key: "k", Owner: "o", Nonce: secretNonce, Token: 1}
	_, err = s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute})
	checkConfigError(t, "Acquire", err, "Migrate")
	checkConfigError(t, "Renew", s.Renew(ctx, a, time.Minute), "Migrate")
	checkConfigError(t, "Release", s.Release(ctx, a), "Migrate")
	_, err = s.Inspect(ctx, "k")
	checkConfigError(t, "Inspect", err, "Migrate")
	checkWaitEndsAtOnce(t, s, "run `leasectl migrate`, or leasepostgres.Migrate")
}

// checkWaitEndsAtOnce checks that Client.Acquire, with a long Wait, gives
// up at its first attempt on b, with TryAcquire's error, which must match
// lease.ErrMisconfigured and mention hint.
func checkWaitEndsAtOnce(t *testing.T, b lease.Backend, hint string) {
	t.Helper()
	ctx := ctxT(t)
	c := newClient(t, b, "waiter")
	p := policy(t, lease.PolicyOptions{TTL: time.Minute, Wait: time.Minute})
	_, tryErr := c.TryAcquire(ctx, "k", p)
	start := time.Now()
	_, err := c.Acquire(ctx, "k", p)
	took := time.Since(start)
	switch {
	case !errors.Is(err, lease.ErrMisconfigured) || errors.Is(err, lease.ErrIndeterminate):
		t.Errorf("Acquire = %v, want lease.ErrMisconfigured", err)
	case tryErr == nil || err.Error() != tryErr.Error():
		t.Errorf("Acquire = %v, want TryAcquire's error %v", err, tryErr)
	case !strings.Contains(err.Error(), hint):
		t.Errorf("Acquire = %v, want it to mention %q", err, hint)
	case strings.Contains(err.Error(), "attempts"):
		t.Errorf("Acquire = %v, want one attempt", err)
	case took > 2*time.Second:
		t.Errorf("Acquire took %v, want it to give up at once", took)
	}
}

// TestWrongPasswordIsAConfigurationError connects with a wrong password to a
// server that checks passwords: every operation fails, and Acquire gives up
// at once, naming the login.
func TestWrongPasswordIsAConfigurationError(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "lease-hba-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	hba := filepath.Join(dir, "pg_hba.conf")
	// The harness's superuser keeps trust; every other role needs its password.
	rules := "host all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(hba, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the server may run as the postgres user
		t.Fatal(err)
	}
	srv := testserver.StartPostgresWith(t, testserver.PostgresOptions{Settings: []string{"hba_file=" + hba}})
	admin := newPool(t, srv.URL(), nil)
	ctx := ctxT(t)
	if err := leasepostgres.Migrate(ctx, admin, leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE ROLE lease_app LOGIN PASSWORD 'right'; GRANT SELECT, INSERT, UPDATE, DELETE ON public.leases TO lease_app"); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("lease_app", "wrong")
	s, err := leasepostgres.New(newPool(t, u.String(), nil), leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Inspect(ctx, "k")
	checkConfigError(t, "Inspect", err, "login refused")
	checkConfigError(t, "Inspect", err, "28P01")
	checkWaitEndsAtOnce(t, s, "check the user, the password")
	u.User = url.UserPassword("lease_app", "right")
	right, err := leasepostgres.New(newPool(t, u.String(), nil), leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer right.Close()
	if _, err := right.Inspect(ctx, "k"); err != nil {
		t.Fatalf("Inspect with the right password: %v", err)
	}
}

func TestPermissionDeniedIsAConfigurationError(t *testing.T) {
	t.Parallel()
	dbURL := newDatabase(t)
	admin := newPool(t, dbURL, nil)
	ctx := ctxT(t)
	newStore(t, admin, leasepostgres.Options{})
	role := "lease_reader_" + strings.ToLower(rand.Text()[:8])
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		admin.Exec(ctx, "DROP OWNED BY "+role)
		admin.Exec(ctx, "DROP ROLE "+role)
	})
	if _, err := admin.Exec(ctx, "GRANT SELECT ON public.leases TO "+role); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	pool := newPool(t, u.String(), nil)
	s, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: secretNonce, TTL: time.Minute})
	checkConfigError(t, "Acquire", err, "permission denied")
	checkConfigError(t, "Acquire", err, "GRANT SELECT, INSERT, UPDATE, DELETE ON")
	checkWaitEndsAtOnce(t, s, "permission denied")
	if _, err := s.Inspect(ctx, "k"); err != nil {
		t.Fatalf("Inspect with SELECT granted: %v", err)
	}
	_, err = s.Sweep(ctx, lease.SweepOptions{Limit: 10})
	checkConfigError(t, "Sweep", err, "permission denied")
	checkConfigError(t, "Sweep", err, "DELETE")
	if _, err := s.Sweep(ctx, lease.SweepOptions{Limit: 10, DryRun: true}); err != nil {
		t.Fatalf("Sweep's dry run with SELECT granted: %v", err)
	}
}

// TestStoreOnTransaction runs the Store on a pgx.Tx: it works
// like a pool, and a failure there is a plain error.
func TestStoreOnTransaction(t *testing.T) {
	t.Parallel()
	_, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	s, err := leasepostgres.New(tx, leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: secretNonce, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	a := lease.Acquisition{Key: "k", Owner: "o", Nonce: secretNonce, Token: tok}
	if err := s.Renew(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.WatchReleases(ctx, "k"); err == nil {
		t.Error("WatchReleases on a transaction succeeded; there is no pool to listen on")
	}
	if _, err := tx.Exec(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("division by zero succeeded")
	}
	_, err = s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: secretNonce, TTL: time.Minute})
	checkConfigError(t, "Acquire in a failed transaction", err, "failed earlier")
}

// TestContextDoneBeforeSending reports a context that ended before the
// statement was sent as a plain error that wraps the context's error.
func TestContextDoneBeforeSending(t *testing.T) {
	t.Parallel()
	s, _ := freshStore(t, leasepostgres.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: secretNonce, TTL: time.Minute})
	if err == nil || errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled context: %v, want a plain error wrapping context.Canceled", err)
	}
}

// TestUnreachableServerNamesTheAddress runs a Store on a pool whose server
// never answers (a loopback port that accepts and stays silent) and on one
// whose port is closed: the errors name the address, and say that nothing
// was sent.
func TestUnreachableServerNamesTheAddress(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn // open, never answered, until the listener closes
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	silent := l.Addr().String()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	for _, addr := range []string{silent, closedAddr} {
		s, err := leasepostgres.New(newPool(t, "postgres://u@"+addr+"/db?sslmode=disable", nil), leasepostgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err = s.Inspect(ctx, "k")
		cancel()
		if err == nil || !strings.Contains(err.Error(), addr) || errors.Is(err, lease.ErrIndeterminate) || !strings.Contains(err.Error(), "not sent") {
			t.Errorf("Inspect on a server at %s that does not answer = %v; want a plain error naming the address", addr, err)
		}
	}
}
