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

	"github.com/golib/lease/internal/pgmigrate"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

// statement is one statement a pgx.QueryTracer saw, with the rows it
// changed or returned.
type statement struct {
	sql  string
	rows int64
}

// statementLog is a pgx.QueryTracer that records every statement sent.
type statementLog struct {
	mu   sync.Mutex
	sent []statement
}

type statementKey struct{}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, statementKey{}, d.SQL)
}

func (l *statementLog) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sql, _ := ctx.Value(statementKey{}).(string)
	l.sent = append(l.sent, statement{sql, d.CommandTag.RowsAffected()})
}

// completed counts the items that completion statements marked done.
func (l *statementLog) completed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.sent {
		if strings.Contains(s.sql, "'done'") {
			n += int(s.rows)
		}
	}
	return n
}

// totalRows sums the rows of statements.
func totalRows(statements []statement) int64 {
	var n int64
	for _, s := range statements {
		n += s.rows
	}
	return n
}

// takeRun takes the statements sent so far, sorted into claims that
// claimed rows, completions, and the rest (claims that found nothing, an
// idle poll, are left out).
func (l *statementLog) takeRun() (claims, completes, other []statement) {
	for _, s := range l.take() {
		switch {
		case strings.Contains(s.sql, "'done'"):
			completes = append(completes, s)
		case strings.Contains(s.sql, "SKIP LOCKED"):
			if s.rows > 0 {
				claims = append(claims, s)
			}
		default:
			other = append(other, s)
		}
	}
	return claims, completes, other
}

// take returns the statements recorded since the last call.
func (l *statementLog) take() []statement {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sent
	l.sent = nil
	return s
}

// noBackend is a lease backend that fails the test when called: a Queue on
// a Claimer must never use its client's backend for items.
type noBackend struct{ t testing.TB }

func (b noBackend) Acquire(context.Context, lease.AcquireRequest) (lease.Token, error) {
	b.t.Error("the lease backend was asked to Acquire")
	return 0, errors.New("no backend")
}

func (b noBackend) Renew(context.Context, lease.Acquisition, time.Duration) error {
	b.t.Error("the lease backend was asked to Renew")
	return errors.New("no backend")
}

func (b noBackend) Release(context.Context, lease.Acquisition) error {
	b.t.Error("the lease backend was asked to Release")
	return errors.New("no backend")
}

func (b noBackend) Inspect(context.Context, string) (lease.Record, error) {
	b.t.Error("the lease backend was asked to Inspect")
	return lease.Record{}, errors.New("no backend")
}

// TestPostgresStatementsPerItem: on PostgreSQL an item costs one statement
// to claim and one to complete or fail (at most: overlapping completions
// share one), and Run claims as many items as it has free slots in one
// statement; no transaction control, and no lease backend, is involved.
func TestPostgresStatementsPerItem(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testserver.Postgres(t).NewDatabase(t)
	if err := leasequeue.MigratePostgres(ctx, pgPool(t, url, 1), leasequeue.PostgresOptions{}); err != nil {
		t.Fatal(err)
	}
	log := &statementLog{}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	src, err := leasequeue.NewPostgresSource(pool, "count", leasequeue.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustEnqueue(ctx, t, src, "a", "b", "c")
	q, err := leasequeue.New(newClient(t, noBackend{t}, "w", nil), src,
		leasequeue.Options{Name: "count", Policy: newPolicy(t, lease.PolicyOptions{TTL: time.Minute}), Concurrency: 8,
			RetryDelay: func(int) time.Duration { return time.Hour }})
	if err != nil {
		t.Fatal(err)
	}
	log.take()

	one := func(what string, wantRows int64) {
		t.Helper()
		sent := log.take()
		if len(sent) != 1 {
			t.Errorf("%s sent %d statements, want 1: %+v", what, len(sent), sent)
			return
		}
		if up := strings.ToUpper(strings.TrimSpace(sent[0].sql)); strings.HasPrefix(up, "BEGIN") || strings.HasPrefix(up, "SET") {
			t.Errorf("%s sent %q", what, sent[0].sql)
		}
		if sent[0].rows != wantRows {
			t.Errorf("%s: %d rows, want %d", what, sent[0].rows, wantRows)
		}
	}
	c, err := q.Claim(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	one("Claim", 1)
	if err := c.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	one("Complete", 1)
	if c, err = q.Claim(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	one("Claim", 1)
	if err := c.Fail(ctx, errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	one("Fail", 1)
	if c, err = q.Claim(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	one("Claim", 1)
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	one("Release", 1)

	// Run: the six items ready (c released, d to h new; b is hidden for
	// its retry delay) are claimed by one statement, and completed by at
	// most one each (completions that overlap go out together).
	mustEnqueue(ctx, t, src, "d", "e", "f", "g", "h")
	log.take()
	var wg sync.WaitGroup
	wg.Add(6)
	runCtx, stop := context.WithCancel(ctx)
	go func() {
		_ = q.Run(runCtx, func(context.Context, *leasequeue.Claim) error { wg.Done(); return nil })
	}()
	wg.Wait()
	eventually(t, 30*time.Second, "six completions", func() bool { return log.completed() == 6 })
	stop()
	claims, completes, other := log.takeRun()
	if len(claims) != 1 || claims[0].rows != 6 || len(completes) > 6 || totalRows(completes) != 6 || len(other) != 0 {
		t.Errorf("Run sent %d claim statements (rows %v), %d completion statements (rows %v) and %d other statements %+v; want one claim of 6 rows and at most 6 completion statements of 6 rows",
			len(claims), claims, len(completes), completes, len(other), other)
	}

	// With one slot, each item is claimed by a statement of its own.
	q1, err := leasequeue.New(newClient(t, noBackend{t}, "w1", nil), src,
		leasequeue.Options{Name: "count", Policy: newPolicy(t, lease.PolicyOptions{TTL: time.Minute})})
	if err != nil {
		t.Fatal(err)
	}
	mustEnqueue(ctx, t, src, "j", "k")
	log.take()
	wg.Add(2)
	runCtx, stop = context.WithCancel(ctx)
	go func() {
		_ = q1.Run(runCtx, func(context.Context, *leasequeue.Claim) error { wg.Done(); return nil })
	}()
	wg.Wait()
	eventually(t, 30*time.Second, "two completions", func() bool { return log.completed() == 2 })
	stop()
	claims, completes, other = log.takeRun()
	if len(claims) != 2 || claims[0].rows != 1 || claims[1].rows != 1 || len(completes) != 2 || len(other) != 0 {
		t.Errorf("Run with one slot sent %d claim statements (rows %v), %d completions and %d other statements %+v; want two claims of one row and 2 completions",
			len(claims), claims, len(completes), len(other), other)
	}
}

// TestPostgresClaimUpgrade: tables made by the migrations before claims
// lived on the rows (001 and 002), holding an item begun under a lease
// elsewhere, upgrade with MigratePostgres; the item is claimed afterwards
// with a token above the one it carries, and every item of the old tables
// is claimed and completed.
func TestPostgresClaimUpgrade(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgPool(t, testserver.Postgres(t).NewDatabase(t), 4)
	ms, err := pgmigrate.Load(leasequeue.PostgresMigrations())
	if err != nil {
		t.Fatal(err)
	}
	old := ms[:0]
	for _, m := range ms {
		if m.Version <= 2 {
			old = append(old, m)
		}
	}
	err = pgmigrate.Run(ctx, pool, old, pgmigrate.Target{
		Schema:   "public",
		Versions: `"public"."leasequeue_jobs_migrations"`,
		Lock:     "github.com/golib/lease/leasequeue.MigratePostgres\x00" + `"public"."leasequeue_jobs"`,
		Render:   func(s string) string { return s },
	})
	if err != nil {
		t.Fatal(err)
	}
	src, err := leasequeue.NewPostgresSource(pool, "up", leasequeue.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustEnqueue(ctx, t, src, "running", "pending", "a/{b}%c")
	// An attempt begun under a lease of a lease backend, as versions
	// before the claims recorded it, with a token from the future, as a
	// backend whose clock is ahead would have issued; hidden for no time,
	// so its lease counts as gone.
	oldToken := lease.Token(time.Now().Add(time.Hour).UnixMicro())
	if _, err := pool.Exec(ctx, `UPDATE public.leasequeue_jobs SET state = 'running', attempts = 1, fence_key = 'up/items/running', fence_token = $1, owner = 'old', visible_at = now() WHERE queue = 'up' AND id = 'running'`, int64(oldToken)); err != nil {
		t.Fatal(err)
	}

	if err := leasequeue.MigratePostgres(ctx, pool, leasequeue.PostgresOptions{}); err != nil {
		t.Fatalf("MigratePostgres over the old tables: %v", err)
	}
	q := newQueue(t, &store{backend: func(t testing.TB) lease.Backend { return noBackend{t} }}, src, "new",
		leasequeue.Options{Name: "up", Policy: newPolicy(t, lease.PolicyOptions{TTL: time.Minute})})
	c, err := q.Claim(ctx, "running")
	if err != nil {
		t.Fatalf("Claim of the item begun before the upgrade: %v", err)
	}
	if c.Snapshot().Token <= oldToken || c.Attempt() != 2 {
		t.Errorf("claim after the upgrade: token %d, attempt %d; want a token above %d, attempt 2", c.Snapshot().Token, c.Attempt(), oldToken)
	}
	if err := c.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"pending", "a/{b}%c"} {
		c, err := q.Claim(ctx, id)
		if err != nil {
			t.Fatalf("Claim(%q) after the upgrade: %v", id, err)
		}
		if it := mustItem(ctx, t, src, id); it.FenceKey != q.Key(id) || it.Token != c.Snapshot().Token {
			t.Errorf("item %q claimed: fence %q token %d; want %q, %d", id, it.FenceKey, it.Token, q.Key(id), c.Snapshot().Token)
		}
		if err := c.Complete(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPostgresClaimNextKeys: the claims of ClaimNext record the lease key
// Queue.Key gives, for IDs holding every reserved byte.
func TestPostgresClaimNextKeys(t *testing.T) {
	t.Parallel()
	s := postgresStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := s.source(t, "keys")
	ids := []string{"plain", "a/b", "{x}", "100%", "%2F", "/{%}/"}
	mustEnqueue(ctx, t, src, ids...)
	q := newQueue(t, s, src, "w", leasequeue.Options{Name: "k/{eys}%", Policy: newPolicy(t, lease.PolicyOptions{TTL: time.Minute})})
	gs, err := src.(leasequeue.Claimer).ClaimNext(ctx, leasequeue.ClaimRequest{
		KeyPrefix: strings.TrimSuffix(q.Key("x"), "x"), Owner: "w", Nonce: "n", TTL: time.Minute}, len(ids))
	if err != nil || len(gs) != len(ids) {
		t.Fatalf("ClaimNext = %+v, %v; want %d items", gs, err, len(ids))
	}
	for _, g := range gs {
		if it := mustItem(ctx, t, src, g.ID); it.FenceKey != q.Key(g.ID) || it.Token != g.Token || it.State != leasequeue.Running {
			t.Errorf("item %q: %+v; want running under %q, token %d", g.ID, it, q.Key(g.ID), g.Token)
		}
	}
}
