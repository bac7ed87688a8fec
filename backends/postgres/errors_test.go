package postgres_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	leasepostgres "github.com/golib/lease/backends/postgres"
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
	checkConfigError(t, "Acquire", err, "grant")
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
