package leasequeue_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasetest"
)

// completionGate is a pgx.QueryTracer that records every statement, like
// statementLog, and holds each completion statement (one that marks an
// item done) before it is sent while the gate is shut, reporting it on
// held, until the gate opens or lets one through.
type completionGate struct {
	statementLog
	mu   sync.Mutex
	shut chan struct{} // closed to open the gate; nil when open
	one  chan struct{} // a receive lets one held statement through
	held chan string
}

func newCompletionGate() *completionGate {
	return &completionGate{held: make(chan string, 100), one: make(chan struct{})}
}

// letOne lets one held statement through.
func (g *completionGate) letOne() { g.one <- struct{}{} }

func (g *completionGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = make(chan struct{})
}

func (g *completionGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.shut)
	g.shut = nil
}

func (g *completionGate) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "'done'") {
		g.mu.Lock()
		shut := g.shut
		g.mu.Unlock()
		if shut != nil {
			g.held <- d.SQL
			select {
			case <-shut:
			case <-g.one:
			}
		}
	}
	return g.statementLog.TraceQueryStart(ctx, c, d)
}

// gatedSource returns a PostgresSource of queue on a fresh database,
// through a pool traced by a completionGate, and the database's URL.
func gatedSource(t *testing.T, queue string) (*leasequeue.PostgresSource, *completionGate, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testserver.Postgres(t).NewDatabase(t)
	if err := leasequeue.MigratePostgres(ctx, pgPool(t, url, 1), leasequeue.PostgresOptions{}); err != nil {
		t.Fatal(err)
	}
	gate := newCompletionGate()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = gate
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	src, err := leasequeue.NewPostgresSource(pool, queue, leasequeue.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return src, gate, url
}

// claimerQueue returns a Queue named queue on src, a Claimer, whose claims
// live ttl on clock (the system's if nil).
func claimerQueue(t *testing.T, src *leasequeue.PostgresSource, queue, owner string, clock lease.Clock, ttl time.Duration) *leasequeue.Queue {
	t.Helper()
	q, err := leasequeue.New(newClient(t, noBackend{t}, owner, clock), src,
		leasequeue.Options{Name: queue, Policy: loadedPolicy(t, ttl)})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// enqueueAndClaim enqueues items ids on src and claims each with q.
func enqueueAndClaim(ctx context.Context, t *testing.T, src *leasequeue.PostgresSource, q *leasequeue.Queue, ids ...string) map[string]*leasequeue.Claim {
	t.Helper()
	mustEnqueue(ctx, t, src, ids...)
	claims := make(map[string]*leasequeue.Claim, len(ids))
	for _, id := range ids {
		c, err := q.Claim(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		claims[id] = c
	}
	return claims
}

// completeAsync completes c on a goroutine of its own and returns where
// its result arrives.
func completeAsync(ctx context.Context, c *leasequeue.Claim) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- c.Complete(ctx) }()
	return ch
}

// holdLone shuts gate and completes c, which finds no completion
// statement in flight and so goes alone; it returns once that statement
// is held at the gate, unsent, with where c's result arrives.
func holdLone(ctx context.Context, gate *completionGate, c *leasequeue.Claim) <-chan error {
	gate.close()
	done := completeAsync(ctx, c)
	<-gate.held
	return done
}

// letLoneThrough lets the lone statement holdLone held go, wants its
// Complete to succeed, and waits until the batch behind it is held.
func letLoneThrough(t *testing.T, gate *completionGate, lone <-chan error) {
	t.Helper()
	gate.letOne()
	if err := <-lone; err != nil {
		t.Fatalf("Complete(lone) = %v", err)
	}
	<-gate.held
}

// waitPending waits until n completions of src wait for a batch.
func waitPending(t *testing.T, src *leasequeue.PostgresSource, n int) {
	t.Helper()
	eventually(t, 30*time.Second, "completions waiting for a batch", func() bool { return src.PendingCompletions() == n })
}

// TestPostgresCompleteBatched: Complete calls that overlap a completion
// statement in flight go out together in one statement, and each gets its
// own answer: done, refused by the fence (a stale claim, in the same
// batch as the current claim's completion of the same item), or, for one
// whose context ends before it is sent, the context's error with nothing
// written.
func TestPostgresCompleteBatched(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, gate, _ := gatedSource(t, "batch")
	// The working claims outlive a loaded machine's stalls; the paused
	// worker's claim runs out after a second.
	q := claimerQueue(t, src, "batch", "w", nil, 3*time.Second)
	claims := enqueueAndClaim(ctx, t, src, q, "a", "b", "c", "d", "e")
	// A worker whose clock stands still claims "taken" and never renews
	// the claim; once it expired, another worker takes the item over.
	paused := claimerQueue(t, src, "batch", "paused", leasetest.NewFakeClock(time.Now()), time.Second)
	stale := enqueueAndClaim(ctx, t, src, paused, "taken")["taken"]
	current := claimOnceFree(ctx, t, q, "taken")
	gate.take()

	// "a" goes alone and is held before it is sent; the rest find it in
	// flight and gather.
	results := map[string]<-chan error{"a": holdLone(ctx, gate, claims["a"])}
	results["b"] = completeAsync(ctx, claims["b"])
	results["c"] = completeAsync(ctx, claims["c"])
	results["d"] = completeAsync(ctx, claims["d"])
	waitPending(t, src, 3)
	results["stale"] = completeAsync(ctx, stale)
	waitPending(t, src, 4)
	results["current"] = completeAsync(ctx, current)
	ectx, ecancel := context.WithCancel(ctx)
	results["e"] = completeAsync(ectx, claims["e"])
	waitPending(t, src, 6)

	ecancel()
	if err := <-results["e"]; err == nil || errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Complete of a claim whose context ended before its batch was sent = %v; want the context's error, not indeterminate", err)
	}
	waitPending(t, src, 5)
	gate.open()
	for _, id := range []string{"a", "b", "c", "d", "current"} {
		if err := <-results[id]; err != nil {
			t.Errorf("Complete(%q) = %v", id, err)
		}
	}
	if err := <-results["stale"]; !errors.Is(err, fence.ErrStale) {
		t.Errorf("Complete of the stale claim of %q, batched with the current claim's = %v; want fence.ErrStale", "taken", err)
	}
	for _, id := range []string{"a", "b", "c", "d", "taken"} {
		if it := mustItem(ctx, t, src, id); it.State != leasequeue.Done {
			t.Errorf("item %q: %+v; want done", id, it)
		}
	}
	if it := mustItem(ctx, t, src, "e"); it.State != leasequeue.Running {
		t.Errorf("item %q, whose completion was dropped: %+v; want running", "e", it)
	}

	// b, c, d and the stale completion of "taken" went in one statement
	// once a's returned, and the current one (the same item) in the next;
	// the stale one marked nothing.
	var stmts, rows, most int64
	for _, s := range gate.take() {
		if strings.Contains(s.sql, "'done'") {
			stmts++
			rows += s.rows
			most = max(most, s.rows)
		}
	}
	if stmts != 3 || rows != 5 || most != 3 {
		t.Errorf("%d completion statements marked %d items done, at most %d in one; want 3 statements marking 5 items, 3 of them in one", stmts, rows, most)
	}
	// The dropped completion wrote nothing: once its claim ran out,
	// another claim completes the item.
	again := claimOnceFree(ctx, t, q, "e")
	if err := again.Complete(ctx); err != nil {
		t.Fatalf("Complete of the item whose completion was dropped, claimed again = %v", err)
	}
}

// TestPostgresCompleteBatchAbandoned: when every Complete of a batch held
// in flight stops waiting, each reports an indeterminate outcome, and the
// batch's statement is cancelled: nothing is written.
func TestPostgresCompleteBatchAbandoned(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, gate, _ := gatedSource(t, "abandoned")
	q := claimerQueue(t, src, "abandoned", "w", nil, time.Minute)
	claims := enqueueAndClaim(ctx, t, src, q, "lone", "x", "y")
	lone := holdLone(ctx, gate, claims["lone"])
	// x and y gather behind "lone"; y stops waiting before it is sent.
	// Once "lone" returned, x goes in a batch of its own, held in flight,
	// and x stops waiting too.
	xctx, xcancel := context.WithCancel(ctx)
	x := completeAsync(xctx, claims["x"])
	yctx, ycancel := context.WithCancel(ctx)
	y := completeAsync(yctx, claims["y"])
	waitPending(t, src, 2)
	ycancel()
	if err := <-y; errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, context.Canceled) {
		t.Errorf("Complete(y), dropped before it was sent = %v; want the context's error", err)
	}
	letLoneThrough(t, gate, lone) // x goes next, in a batch of its own
	xcancel()
	if err := <-x; !errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, context.Canceled) {
		t.Errorf("Complete(x), abandoned in flight = %v; want an indeterminate outcome with the context's error", err)
	}
	gate.open()
	// The abandoned batch's statement ends with its context, unsent.
	eventually(t, 30*time.Second, "the completer to go idle", src.CompleterIdle)
	for id, want := range map[string]leasequeue.State{"lone": leasequeue.Done, "x": leasequeue.Running, "y": leasequeue.Running} {
		if it := mustItem(ctx, t, src, id); it.State != want {
			t.Errorf("item %q: %+v; want %s", id, it, want)
		}
	}
}

// TestPostgresCompleteBatchSessionKilled: the server ends the session of
// a batch just before the batch is sent. Each Complete of the batch then
// reports what became of its item: nil only if the item is done, and
// otherwise an indeterminate outcome (the statement may have been written
// before the session died) or, if the batch provably was not sent, the
// answer of its own statement sent alone. None reports a refusal.
func TestPostgresCompleteBatchSessionKilled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, gate, url := gatedSource(t, "killed")
	q := claimerQueue(t, src, "killed", "w", nil, time.Minute)
	ids := []string{"x", "y", "z"}
	claims := enqueueAndClaim(ctx, t, src, q, append([]string{"lone"}, ids...)...)
	lone := holdLone(ctx, gate, claims["lone"])
	results := map[string]<-chan error{}
	for _, id := range ids {
		results[id] = completeAsync(ctx, claims[id])
	}
	waitPending(t, src, len(ids))
	letLoneThrough(t, gate, lone) // the batch of x, y and z is held, on a connection of its own
	var killed int
	err := pgPool(t, url, 1).QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&killed)
	if err != nil || killed == 0 {
		t.Fatalf("terminating the pool's sessions: %d, %v", killed, err)
	}
	gate.open()
	indeterminate := 0
	for _, id := range ids {
		err := <-results[id]
		state := mustItem(ctx, t, src, id).State
		switch {
		case err == nil && state != leasequeue.Done:
			t.Errorf("Complete(%q) = nil, but the item is %s", id, state)
		case err != nil && errors.Is(err, lease.ErrIndeterminate):
			indeterminate++
		case err != nil:
			t.Errorf("Complete(%q) in a batch whose session was killed = %v (item %s); want nil or an indeterminate outcome", id, err, state)
		}
		t.Logf("Complete(%q) = %v; item %s", id, err, state)
	}
	if indeterminate != 0 && indeterminate != len(ids) {
		t.Errorf("%d of the batch's %d completions indeterminate; want all or none: they shared one statement", indeterminate, len(ids))
	}
}
