package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/lease"
)

// receive waits for a value on c, failing the test after a generous time.
func receive(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no wake-up", what)
	}
}

func watch(t *testing.T, s *leasepostgres.Store, key string) <-chan struct{} {
	t.Helper()
	c, stop, err := s.WatchReleases(ctxT(t), key)
	if err != nil {
		t.Fatalf("WatchReleases(%q): %v", key, err)
	}
	t.Cleanup(stop)
	return c
}

// eventually polls cond until it holds, failing the test after a generous
// time.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 30s", what)
		}
	}
}

// settle waits until the listener listens and the watches of s are
// marked, and then drains cs of the wake-ups those cause.
func settle(t *testing.T, s *leasepostgres.Store, pool *pgxpool.Pool, cs ...<-chan struct{}) {
	t.Helper()
	eventually(t, "the listener listens", func() bool { return leasepostgres.Listening(s) && listening(t, pool) == 1 })
	leasepostgres.WaitMarked(s)
	for range 2 {
		time.Sleep(20 * time.Millisecond)
		for _, c := range cs {
			select {
			case <-c:
			default:
			}
		}
	}
}

// listening returns how many sessions of the pool's database listen.
func listening(t *testing.T, pool *pgxpool.Pool) int {
	var n int
	err := pool.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWatchReleasesWakesOnRelease(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k1", Owner: "o", Nonce: "n", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := watch(t, s, "k1"), watch(t, s, "k2")
	// Once the listener listens it marks the watched keys, and a mark
	// that does not find its key held wakes the key's watches: a release
	// may have gone unseen before. k1 is held: its release notifies.
	receive(t, "mark of k2, which has no lease", c2)
	settle(t, s, pool, c1, c2)
	if err := s.Release(ctx, lease.Acquisition{Key: "k1", Nonce: "n", Token: tok}); err != nil {
		t.Fatal(err)
	}
	receive(t, "release of k1", c1)
	select {
	case <-c2:
		t.Fatal("the watch of k2 woke up for the release of k1")
	default:
	}
}

// TestReleaseNotifiesOnlyWatchedKeys: a release sends a notification only
// for a key that someone waits for.
func TestReleaseNotifiesOnlyWatchedKeys(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	conn := listen(t, s, pool)
	cycle := func(key string) {
		tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: "o", Nonce: "n" + key, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, lease.Acquisition{Key: key, Nonce: "n" + key, Token: tok}); err != nil {
			t.Fatal(err)
		}
	}
	cycle("unwatched")
	// Watch "watched" while it is held, as Client.Acquire does.
	tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: "watched", Owner: "o", Nonce: "w", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	watch(t, s, "watched")
	leasepostgres.WaitMarked(s)
	if err := s.Release(ctx, lease.Acquisition{Key: "watched", Nonce: "w", Token: tok}); err != nil {
		t.Fatal(err)
	}
	if got := firstNotification(t, conn); got != "watched" {
		t.Fatalf("first notification for %q, want %q (the release of an unwatched key notified)", got, "watched")
	}
}

// listen returns a connection of pool that listens on the release
// notifications of s, until the test ends.
func listen(t *testing.T, s *leasepostgres.Store, pool *pgxpool.Pool) *pgxpool.Conn {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{leasepostgres.Channel(s)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Exec(context.Background(), "UNLISTEN *") })
	return conn
}

// firstNotification waits for the next notification on conn and returns
// its payload, the released key.
func firstNotification(t *testing.T, conn *pgxpool.Conn) string {
	t.Helper()
	n, err := conn.Conn().WaitForNotification(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return n.Payload
}

// TestOneListenerPerStore: many watches share one connection, which Close
// gives back to the pool.
func TestOneListenerPerStore(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDatabase(t), nil)
	s := newStore(t, pool, leasepostgres.Options{})
	ctx := ctxT(t)
	var cs []<-chan struct{}
	for _, key := range []string{"a", "b", "c", "a", "b", "c"} {
		c, stop, err := s.WatchReleases(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		cs = append(cs, c)
	}
	for _, c := range cs {
		receive(t, "start of listening", c)
	}
	settle(t, s, pool, cs...)
	if n := pool.Stat().AcquiredConns(); n != 1 {
		t.Fatalf("%d connections taken from the pool, want 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("after Close: %d connections taken from the pool, want 0", n)
	}
	if _, _, err := s.WatchReleases(ctx, "a"); err == nil {
		t.Fatal("WatchReleases after Close succeeded")
	}
	// The connection came back without its LISTEN.
	var listening int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_listening_channels()").Scan(&listening); err != nil || listening != 0 {
		t.Fatalf("a pooled connection listens on %d channels (%v)", listening, err)
	}
	// The pool itself still works.
	if _, err := s.Inspect(ctx, "a"); err != nil {
		t.Fatalf("Inspect after Close: %v", err)
	}
}

// TestListenerGoesIdle: the listener gives its connection back when no
// watch is left.
func TestListenerGoesIdle(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDatabase(t), nil)
	s := newStore(t, pool, leasepostgres.Options{})
	leasepostgres.SetListenIdle(s, 100*time.Millisecond)
	c, stop, err := s.WatchReleases(ctxT(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	receive(t, "start of listening", c)
	stop()
	eventually(t, "connection back in the pool", func() bool { return pool.Stat().AcquiredConns() == 0 })
	// A new watch starts a new listener.
	receive(t, "start of listening again", watch(t, s, "k"))
}

// TestListenerReconnects: when its connection is killed, the listener
// takes another and marks every watched key again, which wakes the
// watches of a key released meanwhile (its release notified nobody) and
// leaves a key still held quiet until its release.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDatabase(t), nil)
	ctx := ctxT(t)
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	lp := &gatedPool{pool: pool}
	lp.open()
	s, err := leasepostgres.NewWithListenPool(pool, leasepostgres.Options{}, lp)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acquire := func(key string) lease.Acquisition {
		a := lease.Acquisition{Key: key, Owner: "o", Nonce: "n-" + key}
		var err error
		if a.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		return a
	}
	k, gone := acquire("k"), acquire("gone")
	c, goneC := watch(t, s, k.Key), watch(t, s, gone.Key)
	settle(t, s, pool, c, goneC)

	// Hold the listener's next connection back until "gone" is released,
	// so that its release notifies nobody.
	lp.shut()
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the listener lost its connection", func() bool { return !leasepostgres.Listening(s) })
	if err := s.Release(ctx, gone); err != nil {
		t.Fatal(err)
	}
	lp.open()
	receive(t, "the mark of a key released while the listener was away", goneC)
	settle(t, s, pool, c, goneC)
	select {
	case <-c:
		t.Fatal("the watch of a key still held woke up when the listener listened again")
	default:
	}
	if err := s.Release(ctx, k); err != nil {
		t.Fatal(err)
	}
	receive(t, "release after reconnecting", c)
}

// gatedPool hands out the connections of pool while it is open, and
// makes Acquire wait while it is shut.
type gatedPool struct {
	pool *pgxpool.Pool
	mu   sync.Mutex
	gate chan struct{} // closed while open
}

func (g *gatedPool) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate == nil {
		g.gate = make(chan struct{})
	}
	select {
	case <-g.gate:
	default:
		close(g.gate)
	}
}

func (g *gatedPool) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = make(chan struct{})
}

func (g *gatedPool) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.pool.Acquire(ctx)
}

func TestDisableNotify(t *testing.T) {
	t.Parallel()
	s, _ := freshStore(t, leasepostgres.Options{DisableNotify: true})
	if _, _, err := s.WatchReleases(ctxT(t), "k"); err == nil {
		t.Fatal("WatchReleases with DisableNotify succeeded")
	}
}

// TestWaiterWakesOnRelease: a Client.Acquire waiting for a held key gets
// it as soon as it is released, long before its next retry (a minute).
func TestWaiterWakesOnRelease(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDatabase(t), func(c *pgxpool.Config) { c.MaxConns = 4 })
	s := newStore(t, pool, leasepostgres.Options{})
	ctx := ctxT(t)
	p := policy(t, lease.PolicyOptions{TTL: 5 * time.Minute, Retry: time.Minute, Wait: 3 * time.Minute})
	holder, err := newClient(t, s, "holder").TryAcquire(ctx, "job", p)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second) // well below Retry
	defer cancel()
	go func() {
		h, err := newClient(t, s, "waiter").Acquire(wctx, "job", p)
		if err == nil && h.Token() <= holder.Token() {
			err = errUnexpectedSuccess
		}
		got <- err
	}()
	eventually(t, "the waiter listens", func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&n)
		return err == nil && n == 1
	})
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

// TestListenerWithoutConnection: a listener that cannot get a connection
// keeps trying while someone waits, and stops by itself when nobody does.
func TestListenerWithoutConnection(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDatabase(t), nil)
	closed := newPool(t, newDatabase(t), nil)
	closed.Close()
	s := newStore(t, pool, leasepostgres.Options{ListenPool: closed})
	_, stop, err := s.WatchReleases(ctxT(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if !leasepostgres.ListenerRunning(s) {
		t.Fatal("no listener after WatchReleases")
	}
	stop()
	eventually(t, "the listener stops", func() bool { return !leasepostgres.ListenerRunning(s) })
}
