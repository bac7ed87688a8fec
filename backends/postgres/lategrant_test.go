package postgres_test

import (
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/tcpproxy"
	"github.com/golib/lease/lease"
)

// TestAcquireAppliedAfterCleanupRelease reproduces, on a real server, an
// acquire statement that is still waiting in its backend when the client
// gives up on it: the client's clean-up release, on the other connection of
// a pool of two, finds nothing held, and the statement is applied after
// TryAcquire returned. The client's error must therefore match
// ErrIndeterminate.
//
// The statement is held up by a row lock (another transaction inserted the
// key's row and has not committed), as it would be by a backend stopped
// with SIGSTOP. When the attempt's context ends, pgx sends a cancel request
// on a new connection and closes the old one; the proxy refuses the new
// connection, as a partition or an overloaded server would, so the
// cancellation never arrives, and the server finishes the statement once
// the lock is free.
func TestAcquireAppliedAfterCleanupRelease(t *testing.T) {
	t.Parallel()
	direct := newDatabase(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	pool := newPool(t, u.String(), func(c *pgxpool.Config) {
		c.MaxConns, c.MinConns = 2, 0
		c.ConnConfig.ConnectTimeout = time.Second
	})
	s := newStore(t, pool, leasepostgres.Options{})
	ctx := ctxT(t)
	// Open both connections of the pool now: none can be opened later.
	c1, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c1.Release()
	c2.Release()

	observer := newPool(t, direct, nil)
	blocker, err := observer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(ctx) }()
	if _, err := blocker.Exec(ctx, `INSERT INTO public.leases (key, owner, nonce, token, expires_at) VALUES ('job', 'blocker', 'blocker', 1, now())`); err != nil {
		t.Fatal(err)
	}

	proxy.Refuse(true)
	p := policy(t, lease.PolicyOptions{TTL: time.Minute, OperationTimeout: 300 * time.Millisecond})
	_, err = newClient(t, s, "waiter").TryAcquire(ctx, "job", p)
	if err == nil {
		t.Fatal("TryAcquire succeeded while its statement waited for a lock")
	}
	var stalled bool
	if qerr := observer.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&stalled); qerr != nil {
		t.Fatal(qerr)
	}
	if !stalled {
		t.Fatalf("no acquire statement waits for the lock after TryAcquire returned %v; the test proves nothing", err)
	}

	// The blocking transaction ends; the stalled statement goes on.
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stalled acquire applied", func() bool {
		var owner string
		qerr := observer.QueryRow(ctx, `SELECT owner FROM public.leases WHERE key = 'job' AND expires_at > now()`).Scan(&owner)
		return qerr == nil && owner == "waiter"
	})
	if !errors.Is(err, lease.ErrIndeterminate) {
		t.Fatalf("TryAcquire = %v: not ErrIndeterminate, yet its attempt was granted after it returned", err)
	}
}
