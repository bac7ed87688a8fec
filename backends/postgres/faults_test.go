package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/backendenv"
	"github.com/golib/lease/internal/testkit/tcpproxy"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// renewals counts renewal events.
type renewals struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	lastErr    error
}

func (r *renewals) Observe(e lease.Event) {
	switch e := e.(type) {
	case *lease.Renewed:
		r.ok.Add(1)
	case *lease.RenewFailed:
		r.failed.Add(1)
		r.mu.Lock()
		r.lastErr = e.Err
		r.mu.Unlock()
	}
}

func observedClient(t testing.TB, s lease.Backend, owner string, obs lease.Observer) *lease.Client {
	t.Helper()
	c, err := lease.NewClient(s, lease.ClientOptions{Owner: owner, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mustLoseBy fails unless m reports a loss with reason.
func mustLoseBy(t *testing.T, m *lease.Managed, reason lease.LostReason) {
	t.Helper()
	select {
	case <-m.Lost():
	case <-time.After(30 * time.Second):
		t.Fatal("the lease was not lost")
	}
	var le *lease.LostError
	if err := m.Err(); !errors.As(err, &le) || le.Reason != reason {
		t.Fatalf("Managed.Err() = %v, want a loss with reason %v", err, reason)
	}
}

// renewedSince waits until h was renewed by a request sent after t0,
// failing the test if m reports a loss first.
func renewedSince(t *testing.T, h *lease.Handle, m *lease.Managed, t0 time.Time) {
	t.Helper()
	eventually(t, "a renewal after "+t0.Format(time.StampMilli), func() bool {
		select {
		case <-m.Lost():
			t.Fatalf("lease lost: %v", m.Err())
		default:
		}
		return h.Deadline().After(t0.Add(h.Policy().LocalLifetime()))
	})
}

// TestPausedServerEndsOverlappingCalls: acquires that overlap on one
// lease.Client, on a paused server, each end, with an unknown outcome (or the deadline, if it waited for a pool
// connection), when its OperationTimeout passes.
func TestPausedServerEndsOverlappingCalls(t *testing.T) {
	t.Parallel()
	srv := testserver.StartPostgres(t)
	s := newStore(t, newPool(t, srv.NewDatabase(t), nil), leasepostgres.Options{})
	defer srv.Resume()
	backendenv.CheckOverlappingTimeouts(t, s, srv.Pause)
}

// TestRestartBeforeDeadline: the database restarts (pg_ctl stop -m
// immediate, then start) while a managed holder renews; it is back before
// the local deadline, so the holder keeps its lease.
func TestRestartBeforeDeadline(t *testing.T) {
	t.Parallel()
	srv := testserver.StartPostgres(t)
	pool := newPool(t, srv.NewDatabase(t), nil)
	s := newStore(t, pool, leasepostgres.Options{})
	ctx := ctxT(t)
	obs := &renewals{}
	p := policy(t, lease.PolicyOptions{TTL: 20 * time.Second, RenewEvery: time.Second, OperationTimeout: time.Second, Retry: 200 * time.Millisecond})
	h, err := observedClient(t, s, "holder", obs).TryAcquire(ctx, "job", p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.StartManaged(ctx)
	if err != nil {
		t.Fatalf("StartManaged: %v", err)
	}
	defer m.Stop(ctx)
	renewedSince(t, h, m, time.Now())

	srv.StopImmediate()
	srv.Start()
	renewedSince(t, h, m, time.Now())
	if err := h.Validate(ctx); err != nil {
		t.Fatalf("Validate after the restart: %v", err)
	}
	if obs.failed.Load() == 0 {
		t.Log("no renewal failed during the restart (it fell between two renewals)")
	}
}

// TestOutagePastDeadline: the database stays down past the local
// deadline, so the holder reports the loss; once it is back, a new
// acquisition gets a greater token.
func TestOutagePastDeadline(t *testing.T) {
	t.Parallel()
	srv := testserver.StartPostgres(t)
	pool := newPool(t, srv.NewDatabase(t), nil)
	s := newStore(t, pool, leasepostgres.Options{})
	ctx := ctxT(t)
	obs := &renewals{}
	p := policy(t, lease.PolicyOptions{TTL: 2 * time.Second, RenewEvery: 500 * time.Millisecond, OperationTimeout: 200 * time.Millisecond, Retry: 100 * time.Millisecond})
	h, err := observedClient(t, s, "holder", obs).TryAcquire(ctx, "job", p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.StartManaged(ctx)
	if err != nil {
		t.Fatalf("StartManaged: %v", err)
	}
	defer m.Stop(ctx)

	srv.StopImmediate()
	mustLoseBy(t, m, lease.DeadlinePassed)
	if obs.failed.Load() < 2 {
		t.Errorf("%d failed renewals before the loss, want retries", obs.failed.Load())
	}
	srv.Start()

	wait := policy(t, lease.PolicyOptions{TTL: 2 * time.Second, Wait: 10 * time.Second})
	h2, err := newClient(t, s, "next").Acquire(ctx, "job", wait)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Token() <= h.Token() {
		t.Fatalf("token after the restart %d, want above %d", h2.Token(), h.Token())
	}
}

// TestUnloggedTableAfterCrash: an UNLOGGED table is empty after a crash,
// so the holder is forgotten, but the next token is still greater.
func TestUnloggedTableAfterCrash(t *testing.T) {
	t.Parallel()
	srv := testserver.StartPostgres(t)
	pool := newPool(t, srv.NewDatabase(t), nil)
	s := newStore(t, pool, leasepostgres.Options{Unlogged: true})
	ctx := ctxT(t)
	before, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n1", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srv.StopImmediate()
	srv.Start()
	var r lease.Record
	eventually(t, "Inspect after the restart", func() bool {
		r, err = s.Inspect(ctx, "k")
		return err == nil
	})
	if r.Held || r.Token != 0 {
		t.Fatalf("Inspect after the crash = %+v; an UNLOGGED table should have been emptied", r)
	}
	after, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n2", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Fatalf("token after the crash %d, want above %d", after, before)
	}
}

// proxied returns a Store whose connections go through a proxy to a fresh
// database on the shared server.
func proxied(t *testing.T, o leasepostgres.Options, configure func(*pgxpool.Config)) (*leasepostgres.Store, *tcpproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(newDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	pool := newPool(t, u.String(), func(c *pgxpool.Config) {
		c.ConnConfig.ConnectTimeout = time.Second
		if configure != nil {
			configure(c)
		}
	})
	return newStore(t, pool, o), proxy
}

// TestCutConnection: connections cut once are replaced and renewals carry
// on; when the database stays unreachable, renewals are retried until the
// local deadline, and then the lease is lost.
func TestCutConnection(t *testing.T) {
	t.Parallel()
	s, proxy := proxied(t, leasepostgres.Options{}, nil)
	ctx := ctxT(t)
	obs := &renewals{}
	p := policy(t, lease.PolicyOptions{TTL: 3 * time.Second, RenewEvery: 500 * time.Millisecond, OperationTimeout: 300 * time.Millisecond, Retry: 100 * time.Millisecond})
	h, err := observedClient(t, s, "holder", obs).TryAcquire(ctx, "job", p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.StartManaged(ctx)
	if err != nil {
		t.Fatalf("StartManaged: %v", err)
	}
	defer m.Stop(ctx)

	proxy.Cut()
	renewedSince(t, h, m, time.Now())

	proxy.Refuse(true)
	proxy.Cut()
	mustLoseBy(t, m, lease.DeadlinePassed)
	if n := obs.failed.Load(); n < 2 {
		t.Errorf("%d failed renewals before the loss, want retries", n)
	}
	var le *lease.LostError
	if errors.As(m.Err(), &le) && le.Err == nil {
		t.Errorf("the loss does not carry the last renewal error: %v", m.Err())
	}
}

// TestUnansweredRequestIsIndeterminate: a release that reaches the
// database but whose reply is lost is reported as indeterminate, and it
// did apply.
func TestUnansweredRequestIsIndeterminate(t *testing.T) {
	t.Parallel()
	// One connection, on which the release statement is prepared before
	// the replies go missing: the release itself is then sent at once.
	s, proxy := proxied(t, leasepostgres.Options{DisableNotify: true}, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := ctxT(t)
	a := lease.Acquisition{Key: "k", Owner: "o", Nonce: "n"}
	var err error
	if a.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, lease.Acquisition{Key: "other", Nonce: "x"}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("warm-up release: %v", err)
	}
	proxy.Swallow(true)
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = s.Release(rctx, a)
	cancel()
	if !errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release without a reply: %v, want indeterminate", err)
	}
	proxy.Swallow(false)
	proxy.Cut()
	var r lease.Record
	eventually(t, "Inspect", func() bool { r, err = s.Inspect(ctx, "k"); return err == nil })
	if r.Held {
		t.Fatalf("Inspect = %+v: the unanswered release was not applied", r)
	}
}

// TestLockWaitIsBounded: a renewal stuck behind a row lock returns when
// the client's OperationTimeout passes, as indeterminate.
func TestLockWaitIsBounded(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	p := policy(t, lease.PolicyOptions{TTL: 10 * time.Second, OperationTimeout: 300 * time.Millisecond})
	h, err := newClient(t, s, "holder").TryAcquire(ctx, "job", p)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT FROM public.leases WHERE key = 'job' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	err = h.Renew(ctx)
	if !errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Renew behind a row lock: %v, want indeterminate after the operation timeout", err)
	}
}
