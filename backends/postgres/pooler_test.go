package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// TestPreparedStatementsBehindTransactionPooler runs the Store and Migrate
// with pgx's default exec mode (named prepared statements) through a real
// PgBouncer 1.18 in transaction mode with one server session, which two
// client connections then share: the second to prepare a statement finds
// the first's on the session (SQLSTATE 42P05). Migrate must work anyway;
// the Store's error must name the pooler and the fix, not a migration,
// and end Acquire's wait at once; the fix must work.
func TestPreparedStatementsBehindTransactionPooler(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	bouncer := testserver.PgBouncer(t, newDatabase(t), "transaction", 1)
	first := newPool(t, bouncer, func(c *pgxpool.Config) { c.MaxConns = 1 })
	second := newPool(t, bouncer, func(c *pgxpool.Config) { c.MaxConns = 1 })
	for i, pool := range []*pgxpool.Pool{first, second} {
		if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
			t.Fatalf("Migrate through the pooler, client connection %d: %v", i+1, err)
		}
	}
	s1 := newStore(t, first, leasepostgres.Options{DisableNotify: true})
	p := policy(t, lease.PolicyOptions{TTL: time.Minute, Wait: time.Minute})
	h, err := newClient(t, s1, "first").Acquire(ctx, "other", p)
	if err != nil {
		t.Fatalf("the first client connection's Acquire: %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Inspect(ctx, "k"); err != nil {
		t.Fatalf("the first client connection's Inspect: %v", err)
	}
	s2, err := leasepostgres.New(second, leasepostgres.Options{DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	_, err = s2.Inspect(ctx, "k")
	t.Logf("the second client connection's Inspect: %v", err)
	switch {
	case err == nil:
		t.Fatal("the second client connection's Inspect worked; the test proves nothing")
	case !errors.Is(err, lease.ErrMisconfigured):
		t.Errorf("Inspect = %v, want lease.ErrMisconfigured", err)
	case !strings.Contains(err.Error(), "default_query_exec_mode=exec") || !strings.Contains(err.Error(), "transaction mode"):
		t.Errorf("Inspect = %v, want the pooler named and default_query_exec_mode=exec advised", err)
	case strings.Contains(err.Error(), "Migrate") || strings.Contains(err.Error(), "migrate"):
		t.Errorf("Inspect = %v advises a migration", err)
	}

	start := time.Now()
	_, err = newClient(t, s2, "second").Acquire(ctx, "k", p)
	if !errors.Is(err, lease.ErrMisconfigured) || time.Since(start) > 5*time.Second {
		t.Fatalf("Acquire = %v after %v, want lease.ErrMisconfigured at once", err, time.Since(start))
	}

	fixed := newPool(t, bouncer+"&default_query_exec_mode=exec", func(c *pgxpool.Config) { c.MaxConns = 1 })
	s3, err := leasepostgres.New(fixed, leasepostgres.Options{DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	h, err = newClient(t, s3, "fixed").TryAcquire(ctx, "k", p)
	if err != nil {
		t.Fatalf("TryAcquire with default_query_exec_mode=exec: %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
