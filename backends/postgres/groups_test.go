package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// TestGroups runs the semaphore and set checks on the default table.
func TestGroups(t *testing.T) {
	t.Parallel()
	s, _ := freshStore(t, leasepostgres.Options{})
	exerciseGroups(t, s)
}

// TestGroupsAsyncCommit runs them on statements that also set
// synchronous_commit, and on a table whose names need quoting and
// contain the dollar quote around the functions' bodies.
func TestGroupsAsyncCommit(t *testing.T) {
	t.Parallel()
	url := newDatabase(t)
	for _, o := range []leasepostgres.Options{
		{AsyncCommit: true},
		{Schema: "groups $body$", Table: `Lease "Table" $body$ $body1$`},
	} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			t.Parallel()
			exerciseGroups(t, newStore(t, newPool(t, url, nil), o))
		})
	}
}

// TestGroupsExecModes runs them with each of pgx's query exec modes, as a
// connection pooler in transaction mode needs some of them.
func TestGroupsExecModes(t *testing.T) {
	t.Parallel()
	url := newDatabase(t)
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement,
		pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec,
		pgx.QueryExecModeSimpleProtocol,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := newPool(t, url, func(c *pgxpool.Config) {
				c.ConnConfig.DefaultQueryExecMode = mode
			})
			exerciseGroups(t, newStore(t, pool, leasepostgres.Options{Table: "leases_" + mode.String()}))
		})
	}
}

// TestGroupsThroughPgBouncer runs them through PgBouncer in transaction
// mode, with two server sessions for four client connections: the
// statements need no session state.
func TestGroupsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	url := newDatabase(t)
	if err := leasepostgres.Migrate(ctxT(t), newPool(t, url, nil), leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	bouncer := testserver.PgBouncer(t, url, "transaction", 2)
	pool := newPool(t, bouncer, func(c *pgxpool.Config) {
		c.MaxConns = 4
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	})
	s, err := leasepostgres.New(pool, leasepostgres.Options{DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exerciseGroups(t, s)
}

// exerciseGroups checks AcquirePermit, AcquireSet, RenewSet and
// ReleaseSet on s, one step after another.
func exerciseGroups(t *testing.T, s *leasepostgres.Store) {
	t.Helper()
	t.Run("permits", func(t *testing.T) { exercisePermits(t, s) })
	t.Run("sets", func(t *testing.T) { exerciseSets(t, s) })
}

type permit struct {
	slot int
	a    lease.Acquisition
}

// takePermit acquires a permit of sem for owner, with nonce owner+"-nonce".
func takePermit(t *testing.T, s *leasepostgres.Store, sem, owner string, permits int, ttl time.Duration) (permit, error) {
	t.Helper()
	r := lease.AcquireRequest{Key: sem, Owner: owner, Nonce: owner + "-nonce", TTL: ttl}
	slot, tok, err := s.AcquirePermit(ctxT(t), r, permits)
	return permit{slot, lease.Acquisition{Key: lease.PermitKey(sem, slot), Owner: owner, Nonce: r.Nonce, Token: tok}}, err
}

func mustPermit(t *testing.T, s *leasepostgres.Store, sem, owner string, permits int, ttl time.Duration, wantSlot int) permit {
	t.Helper()
	p, err := takePermit(t, s, sem, owner, permits, ttl)
	if err != nil {
		t.Fatalf("AcquirePermit(%q, %s, %d): %v", sem, owner, permits, err)
	}
	if p.slot != wantSlot {
		t.Fatalf("AcquirePermit(%q, %s, %d) = slot %d, want %d", sem, owner, permits, p.slot, wantSlot)
	}
	return p
}

func refusedPermit(t *testing.T, s *leasepostgres.Store, sem, owner string, permits int) *lease.NotAcquiredError {
	t.Helper()
	_, err := takePermit(t, s, sem, owner, permits, time.Minute)
	var na *lease.NotAcquiredError
	if !errors.As(err, &na) {
		t.Fatalf("AcquirePermit(%q, %s, %d) = %v, want a *lease.NotAcquiredError", sem, owner, permits, err)
	}
	if na.Key != sem {
		t.Errorf("NotAcquiredError.Key = %q, want the semaphore %q", na.Key, sem)
	}
	return na
}

func exercisePermits(t *testing.T, s *leasepostgres.Store) {
	ctx := ctxT(t)
	const sem = "sem/payments"

	a := mustPermit(t, s, sem, "a", 2, time.Minute, 0)
	if again := mustPermit(t, s, sem, "a", 2, time.Minute, 0); again.a.Token != a.a.Token {
		t.Fatalf("a retried acquisition got token %d, want %d (the same grant)", again.a.Token, a.a.Token)
	}
	b := mustPermit(t, s, sem, "b", 2, 30*time.Second, 1)
	if b.a.Token <= a.a.Token {
		t.Fatalf("slot 1 got token %d, not above slot 0's %d", b.a.Token, a.a.Token)
	}
	na := refusedPermit(t, s, sem, "c", 2)
	if na.Holder != "b" || na.Token != b.a.Token || na.Remaining <= 0 || na.Remaining > 30*time.Second {
		t.Fatalf("refusal names %q token %d for %v, want b (whose lease ends first) token %d within 30s", na.Holder, na.Token, na.Remaining, b.a.Token)
	}
	if rec, err := s.Inspect(ctx, lease.PermitKey(sem, 1)); err != nil || !rec.Held || rec.Owner != "b" || rec.Token != b.a.Token {
		t.Fatalf("Inspect(permit 1) = %+v, %v; want held by b", rec, err)
	}

	// A permit is an ordinary lease: Release frees its slot, and the next
	// permit's token is above every earlier one, of any slot.
	if err := s.Release(ctx, a.a); err != nil {
		t.Fatalf("Release(permit 0): %v", err)
	}
	c := mustPermit(t, s, sem, "c", 2, time.Minute, 0)
	if c.a.Token <= b.a.Token {
		t.Fatalf("slot 0 got token %d after slot 1's %d", c.a.Token, b.a.Token)
	}
	// The history columns: a grant sets acquired and renewed, and counts
	// a transition on a row that existed.
	if rec, err := s.Inspect(ctx, c.a.Key); err != nil || rec.Transitions != 1 || rec.AcquiredAt.IsZero() || !rec.RenewedAt.Equal(rec.AcquiredAt) {
		t.Fatalf("Inspect(permit 0) after its second grant = %+v, %v; want 1 transition, acquired = renewed", rec, err)
	}
	if rec, err := s.Inspect(ctx, b.a.Key); err != nil || rec.Transitions != 0 || rec.AcquiredAt.IsZero() {
		t.Fatalf("Inspect(permit 1) after its first grant = %+v, %v; want 0 transitions, acquired", rec, err)
	}

	// More permits: slot 2. Then fewer: permits at or above the new
	// number are not counted, but their tokens still are.
	d := mustPermit(t, s, sem, "d", 3, time.Minute, 2)
	for _, p := range []permit{c, b} {
		if err := s.Release(ctx, p.a); err != nil {
			t.Fatalf("Release(permit %d): %v", p.slot, err)
		}
	}
	e := mustPermit(t, s, sem, "e", 1, time.Minute, 0)
	if e.a.Token <= d.a.Token {
		t.Fatalf("slot 0 of 1 got token %d, not above slot 2's %d", e.a.Token, d.a.Token)
	}
	if na := refusedPermit(t, s, sem, "f", 1); na.Holder != "e" {
		t.Fatalf("refusal with 1 permit names %q, want e", na.Holder)
	}
	// d, above the new number, keeps its permit until it ends it.
	if err := s.Renew(ctx, d.a, time.Minute); err != nil {
		t.Fatalf("Renew(permit 2 above the number of permits): %v", err)
	}

	// A forced release frees a slot as a release does, and the holder's
	// retry (same nonce) after it gets a new grant.
	if _, err := s.ForceRelease(ctx, e.a.Key, e.a.Token); err != nil {
		t.Fatal(err)
	}
	e2 := mustPermit(t, s, sem, "e", 1, time.Minute, 0)
	if e2.a.Token <= e.a.Token {
		t.Fatalf("the grant after a forced release got token %d, not above %d", e2.a.Token, e.a.Token)
	}

	// Bad arguments are refused before any I/O, and not as NotAcquired.
	for _, n := range []int{0, -1, lease.MaxPermits + 1} {
		_, err := takePermit(t, s, "sem/bad", "g", n, time.Minute)
		if err == nil || errors.Is(err, lease.ErrNotAcquired) {
			t.Errorf("AcquirePermit with %d permits: %v, want an error", n, err)
		}
	}
	if _, err := takePermit(t, s, "sem/bad", "g", 1, 0); err == nil {
		t.Error("AcquirePermit with TTL 0 succeeded")
	}
	mustPermit(t, s, "sem/max", "g", lease.MaxPermits, time.Minute, 0)
}

func exerciseSets(t *testing.T, s *leasepostgres.Store) {
	ctx := ctxT(t)
	keys := []string{"acct/42", "acct/17", "acct/9"} // unsorted: the Store sorts
	set := lease.Acquisition{Owner: "mover", Nonce: "mover-nonce"}
	req := lease.AcquireRequest{Owner: set.Owner, Nonce: set.Nonce, TTL: time.Minute}

	// acct/42 held by a plain lease: the set is refused whole, names it,
	// and leaves no row behind for the free keys.
	other := lease.Acquisition{Key: "acct/42", Owner: "other", Nonce: "other-nonce"}
	var err error
	if other.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: other.Key, Owner: other.Owner, Nonce: other.Nonce, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	_, err = s.AcquireSet(ctx, keys, req)
	var na *lease.NotAcquiredError
	if !errors.As(err, &na) || na.Key != "acct/42" || na.Holder != "other" || na.Token != other.Token || na.Remaining <= 0 {
		t.Fatalf("AcquireSet over a held key = %v, want NotAcquired naming acct/42 held by other", err)
	}
	for _, k := range []string{"acct/17", "acct/9"} {
		if rec, err := s.Inspect(ctx, k); err != nil || rec.Held || rec.Token != 0 {
			t.Fatalf("after a refused set, Inspect(%q) = %+v, %v; want no record", k, rec, err)
		}
	}

	if err := s.Release(ctx, other); err != nil {
		t.Fatal(err)
	}
	if set.Token, err = s.AcquireSet(ctx, keys, req); err != nil {
		t.Fatalf("AcquireSet: %v", err)
	}
	if set.Token <= other.Token {
		t.Fatalf("set token %d is not above acct/42's last token %d", set.Token, other.Token)
	}
	if again, err := s.AcquireSet(ctx, keys, req); err != nil || again != set.Token {
		t.Fatalf("retried AcquireSet = %d, %v; want the same token %d", again, err, set.Token)
	}
	for _, k := range keys {
		if rec, err := s.Inspect(ctx, k); err != nil || !rec.Held || rec.Owner != set.Owner || rec.Token != set.Token {
			t.Fatalf("Inspect(%q) = %+v, %v; want held by the set with token %d", k, rec, err, set.Token)
		}
	}
	// Each key is an ordinary lease: a single acquire is refused.
	if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: "acct/9", Owner: "x", Nonce: "x", TTL: time.Minute}); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("Acquire of a key of a held set = %v, want ErrNotAcquired", err)
	}
	// An overlapping set is refused, naming the first held key in order.
	_, err = s.AcquireSet(ctx, []string{"acct/9", "acct/1"}, lease.AcquireRequest{Owner: "y", Nonce: "y", TTL: time.Minute})
	if !errors.As(err, &na) || na.Key != "acct/9" || na.Holder != set.Owner {
		t.Fatalf("overlapping AcquireSet = %v, want NotAcquired naming acct/9", err)
	}

	// The history: acct/42's row existed (a transition), the others are
	// new; the retry renewed them all.
	for k, want := range map[string]uint64{"acct/42": 1, "acct/17": 0, "acct/9": 0} {
		if rec, err := s.Inspect(ctx, k); err != nil || rec.Transitions != want || rec.AcquiredAt.IsZero() || !rec.RenewedAt.After(rec.AcquiredAt) {
			t.Fatalf("Inspect(%q) after the set's grant and its retry = %+v, %v; want %d transitions, renewed after acquired", k, rec, err, want)
		}
	}
	if err := s.RenewSet(ctx, keys, set, 2*time.Minute); err != nil {
		t.Fatalf("RenewSet: %v", err)
	}
	if rec, _ := s.Inspect(ctx, "acct/9"); rec.Remaining <= time.Minute || !rec.RenewedAt.After(rec.AcquiredAt) {
		t.Fatalf("after RenewSet, acct/9 = %+v, want more than a minute left and renewed after acquired", rec)
	}

	// A forged acquisition (wrong nonce) renews and releases nothing.
	forged := set
	forged.Nonce = "forged"
	var lost *lease.LostError
	if err := s.RenewSet(ctx, keys, forged, time.Hour); !errors.As(err, &lost) || lost.Reason != lease.Superseded || lost.Key != "acct/17" {
		t.Fatalf("forged RenewSet = %v, want Superseded on acct/17", err)
	}
	if err := s.ReleaseSet(ctx, keys, forged); !errors.As(err, &lost) || lost.Reason != lease.Superseded || lost.Key != "acct/17" {
		t.Fatalf("forged ReleaseSet = %v, want Superseded on acct/17", err)
	}
	for _, k := range keys {
		if rec, err := s.Inspect(ctx, k); err != nil || !rec.Held || rec.Token != set.Token || rec.Remaining > 2*time.Minute {
			t.Fatalf("after forged calls, Inspect(%q) = %+v, %v; want held by the set, unchanged", k, rec, err)
		}
	}

	// One key force-released: RenewSet changes nothing and names it;
	// ReleaseSet names it and releases the others.
	if _, err := s.ForceRelease(ctx, "acct/42", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.RenewSet(ctx, keys, set, time.Hour); !errors.As(err, &lost) || lost.Reason != lease.ForceReleased || lost.Key != "acct/42" || lost.Token != set.Token {
		t.Fatalf("RenewSet after a forced release = %v, want ForceReleased on acct/42", err)
	}
	if rec, _ := s.Inspect(ctx, "acct/17"); rec.Remaining > 2*time.Minute {
		t.Fatalf("a refused RenewSet extended acct/17 to %v", rec.Remaining)
	}
	if err := s.ReleaseSet(ctx, keys, set); !errors.As(err, &lost) || lost.Reason != lease.ForceReleased || lost.Key != "acct/42" {
		t.Fatalf("ReleaseSet after a forced release = %v, want ForceReleased on acct/42", err)
	}
	for _, k := range keys {
		if rec, err := s.Inspect(ctx, k); err != nil || rec.Held {
			t.Fatalf("after ReleaseSet, Inspect(%q) = %+v, %v; want free", k, rec, err)
		}
	}
	if err := s.RenewSet(ctx, keys, set, time.Minute); !errors.As(err, &lost) || lost.Key != "acct/17" || lost.Reason != lease.Expired {
		t.Fatalf("RenewSet after ReleaseSet = %v, want Expired on acct/17", err)
	}
	if err := s.RenewSet(ctx, []string{"acct/none"}, set, time.Minute); !errors.As(err, &lost) || lost.Reason != lease.RecordLost {
		t.Fatalf("RenewSet of a key without a record = %v, want RecordLost", err)
	}

	// The next set's token is above every key's, and a release by nonce
	// alone (token 0) ends it.
	next := lease.Acquisition{Owner: "next", Nonce: "next-nonce"}
	if next.Token, err = s.AcquireSet(ctx, append(slices.Clone(keys), "acct/new"), lease.AcquireRequest{Owner: next.Owner, Nonce: next.Nonce, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if next.Token <= set.Token {
		t.Fatalf("the next set's token %d is not above %d", next.Token, set.Token)
	}
	if err := s.ReleaseSet(ctx, append(slices.Clone(keys), "acct/new"), lease.Acquisition{Nonce: next.Nonce}); err != nil {
		t.Fatalf("ReleaseSet by nonce alone: %v", err)
	}

	for _, bad := range [][]string{nil, make([]string, lease.MaxSetKeys+1)} {
		for i := range bad {
			bad[i] = "k" + strconv.Itoa(i)
		}
		if _, err := s.AcquireSet(ctx, bad, req); err == nil || errors.Is(err, lease.ErrNotAcquired) {
			t.Errorf("AcquireSet of %d keys: %v, want an error", len(bad), err)
		}
	}
}

// TestAcquirePermitTriesTheNextSlot holds up a permit acquisition behind
// a plain Acquire of slot 0's key that commits after the permit's read:
// its upsert of slot 0 finds the slot taken, and it takes slot 1 in the
// same call instead of giving up.
func TestAcquirePermitTriesTheNextSlot(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	const sem = "sem/race"
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	ts, err := leasepostgres.New(tx, leasepostgres.Options{DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	plain, err := ts.Acquire(ctx, lease.AcquireRequest{Key: lease.PermitKey(sem, 0), Owner: "plain", Nonce: "plain", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		p   permit
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := takePermit(t, s, sem, "permit", 2, time.Minute)
		done <- result{p, err}
	}()
	waitForLockWaiters(t, pool, 1)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.p.slot != 1 {
		t.Fatalf("AcquirePermit behind a racer for slot 0 = slot %d, %v; want slot 1", r.p.slot, r.err)
	}
	if r.p.a.Token <= plain {
		t.Fatalf("slot 1 got token %d, not above the racer's %d", r.p.a.Token, plain)
	}
}

// TestAcquirePermitConcurrently lets many acquisitions compete for a few
// permits: at no time do more than n hold them, each slot has one holder,
// every token is distinct, and when n acquisitions start on a free
// semaphore at once, all n are granted.
func TestAcquirePermitConcurrently(t *testing.T) {
	t.Parallel()
	s, _ := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	const n, workers, rounds = 3, 8, 10

	// All n of n at once: none may give up while a slot is free.
	for round := range 5 {
		sem := fmt.Sprintf("sem/burst/%d", round)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				_, err := takePermit(t, s, sem, fmt.Sprintf("w%d", i), n, time.Minute)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %d acquisitions of %d free permits: %v", round, n, n, err)
			}
		}
	}

	const sem = "sem/busy"
	var (
		holders [n]atomic.Int32
		held    atomic.Int32
		mu      sync.Mutex
		tokens  = map[lease.Token]bool{}
		wg      sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				p, err := takePermit(t, s, sem, fmt.Sprintf("w%d-r%d", w, r), n, time.Minute)
				if errors.Is(err, lease.ErrNotAcquired) {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					t.Errorf("AcquirePermit: %v", err)
					return
				}
				if c := holders[p.slot].Add(1); c != 1 {
					t.Errorf("slot %d has %d holders", p.slot, c)
				}
				if c := held.Add(1); c > n {
					t.Errorf("%d permits held, more than %d", c, n)
				}
				mu.Lock()
				if tokens[p.a.Token] {
					t.Errorf("token %d granted twice", p.a.Token)
				}
				tokens[p.a.Token] = true
				mu.Unlock()
				time.Sleep(time.Millisecond)
				held.Add(-1)
				holders[p.slot].Add(-1)
				if err := s.Release(ctx, p.a); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(tokens) < n {
		t.Fatalf("only %d grants", len(tokens))
	}
}

// TestAcquireSetNoDeadlock has many goroutines acquire, renew and release
// random overlapping sets of a few keys at once, on keys that are first
// missing: every call ends with a grant or a refusal (a deadlock would
// end one with an error), and the database counts no deadlock.
func TestAcquireSetNoDeadlock(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	before := deadlocks(t, pool)
	const workers, rounds = 12, 25
	keys := []string{"d/a", "d/b", "d/c", "d/d", "d/e", "d/f", "d/g", "d/h"}
	var granted atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 26))
			for r := range rounds {
				set := slices.Clone(keys)
				rng.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
				set = set[:2+rng.IntN(4)]
				a := lease.Acquisition{Owner: "w", Nonce: fmt.Sprintf("w%d-r%d", w, r)}
				var err error
				a.Token, err = s.AcquireSet(ctx, set, lease.AcquireRequest{Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute})
				if errors.Is(err, lease.ErrNotAcquired) {
					continue
				}
				if err != nil {
					t.Errorf("AcquireSet(%q): %v", set, err)
					return
				}
				granted.Add(1)
				if err := s.RenewSet(ctx, set, a, time.Minute); err != nil {
					t.Errorf("RenewSet(%q): %v", set, err)
					return
				}
				if err := s.ReleaseSet(ctx, set, a); err != nil {
					t.Errorf("ReleaseSet(%q): %v", set, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if granted.Load() == 0 {
		t.Fatal("no set was granted")
	}
	if after := deadlocks(t, pool); after != before {
		t.Fatalf("the database counted %d deadlocks", after-before)
	}
}

// deadlocks returns how many deadlocks the pool's database has counted,
// once every other session of it has ended (a session reports its counts
// at the latest when it ends).
func deadlocks(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	ctx := ctxT(t)
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	// Close the pool's other connections, so their sessions report.
	for _, idle := range pool.AcquireAllIdle(ctx) {
		_ = idle.Conn().Close(ctx)
		idle.Release()
	}
	eventually(t, "the other sessions end", func() bool {
		var others int
		err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others)
		return err == nil && others == 0
	})
	var n int64
	err = c.QueryRow(ctx, `SELECT (SELECT pg_stat_clear_snapshot()) IS NULL,
			deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(nil, &n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestGroupReleasesWakeWatchers: the release of a permit wakes a waiter
// watching the permit's key, and ReleaseSet wakes a waiter watching a key
// of the set; watching a held key wakes nobody before its release.
func TestGroupReleasesWakeWatchers(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	const sem = "sem/wake"
	p := mustPermit(t, s, sem, "a", 1, time.Minute, 0)
	set := lease.Acquisition{Owner: "s", Nonce: "set-nonce"}
	keys := []string{"set/x", "set/y"}
	var err error
	if set.Token, err = s.AcquireSet(ctx, keys, lease.AcquireRequest{Owner: set.Owner, Nonce: set.Nonce, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	permitC, setC, otherC := watch(t, s, p.a.Key), watch(t, s, "set/y"), watch(t, s, lease.PermitKey("sem/other", 0))
	settle(t, s, pool, permitC, setC, otherC)

	if err := s.Release(ctx, p.a); err != nil {
		t.Fatal(err)
	}
	receive(t, "release of a permit", permitC)
	if err := s.ReleaseSet(ctx, keys, set); err != nil {
		t.Fatal(err)
	}
	receive(t, "release of a set", setC)
	select {
	case <-otherC:
		t.Fatal("the watch of another semaphore's permit woke up")
	default:
	}
}

// TestCheckGroupFunctions: Diagnose reports the functions of migration 005
// missing, or without EXECUTE for the role.
func TestCheckGroupFunctions(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	url := newDatabase(t)
	admin := newPool(t, url, nil)
	s := newStore(t, admin, leasepostgres.Options{})
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check after Migrate: %v", err)
	}

	role := fmt.Sprintf("lease_groups_%d", time.Now().UnixNano())
	_, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN;
GRANT SELECT, INSERT, UPDATE, DELETE ON public.leases TO `+role+`;
REVOKE EXECUTE ON FUNCTION public.leases_permit(text, text, text, interval, integer) FROM PUBLIC`)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role)
	})
	rs, err := leasepostgres.New(newPool(t, url, func(c *pgxpool.Config) { c.ConnConfig.User = role }), leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if p := problems(rs.Diagnose(ctx)); !strings.Contains(p, `lacks EXECUTE on "public"."leases_permit"(text, text, text, interval, integer)`) {
		t.Fatalf("Diagnose as a role without EXECUTE: %q", p)
	}
	_, _, err = rs.AcquirePermit(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n", TTL: time.Minute}, 1)
	if !errors.Is(err, lease.ErrMisconfigured) || errors.Is(err, lease.ErrIndeterminate) || !strings.Contains(err.Error(), `GRANT EXECUTE ON FUNCTION "public"."leases_permit"`) {
		t.Fatalf("AcquirePermit without EXECUTE = %v, want lease.ErrMisconfigured naming the grant", err)
	}

	if _, err := admin.Exec(ctx, `DROP FUNCTION public.leases_setrenew(text[], text, bigint, interval)`); err != nil {
		t.Fatal(err)
	}
	p := problems(s.Diagnose(ctx))
	if !strings.Contains(p, `lacks the functions "public"."leases_setrenew"(text[], text, bigint, interval) of migration 005`) {
		t.Fatalf("Diagnose without a function: %q", p)
	}
	err = s.RenewSet(ctx, []string{"k"}, lease.Acquisition{Nonce: "n", Token: 1}, time.Minute)
	if !errors.Is(err, lease.ErrMisconfigured) || errors.Is(err, lease.ErrIndeterminate) ||
		!strings.Contains(err.Error(), `function "public"."leases_setrenew" not found`) || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("RenewSet without its function = %v, want lease.ErrMisconfigured naming the function and saying to migrate", err)
	}
}

// TestPermitUpdatesStayHOT: the permits' partial index is on key alone,
// which no update changes, so the updates of permit rows stay HOT (no new
// index entries), as those of other rows do.
func TestPermitUpdatesStayHOT(t *testing.T) {
	t.Parallel()
	_, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		s, err := leasepostgres.New(tx, leasepostgres.Options{DisableNotify: true})
		if err != nil {
			return err
		}
		defer s.Close()
		for i := range 3 {
			r := lease.AcquireRequest{Key: "sem/hot", Owner: "o", Nonce: fmt.Sprint("n", i), TTL: time.Minute}
			slot, tok, err := s.AcquirePermit(ctx, r, 2)
			if err != nil {
				return err
			}
			a := lease.Acquisition{Key: lease.PermitKey(r.Key, slot), Nonce: r.Nonce, Token: tok}
			if err := s.Renew(ctx, a, time.Minute); err != nil {
				return err
			}
			if err := s.Release(ctx, a); err != nil {
				return err
			}
		}
		var upd, hot int64
		err = tx.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
			WHERE relid = 'public.leases'::regclass`).Scan(&upd, &hot)
		if err != nil {
			return err
		}
		if upd < 8 || hot != upd {
			t.Errorf("%d updates of permit rows, %d of them HOT; want all HOT", upd, hot)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWatchOfHeldKeyIsQuiet: once the listener listens, watching a key
// that is held wakes nobody until its release (the mark found it held, so
// its release notifies), while watching a key released before the mark
// wakes the watch at once. A waiter for a semaphore watches each permit,
// and one for a set each key: a wake-up per key would make it ask again
// once per key for nothing.
func TestWatchOfHeldKeyIsQuiet(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	first := watch(t, s, "first")
	settle(t, s, pool, first)

	held := lease.Acquisition{Key: "held", Owner: "o", Nonce: "held-nonce"}
	var err error
	if held.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: held.Key, Owner: held.Owner, Nonce: held.Nonce, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	gone := lease.Acquisition{Key: "gone", Owner: "o", Nonce: "gone-nonce"}
	if gone.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: gone.Key, Owner: gone.Owner, Nonce: gone.Nonce, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, gone); err != nil {
		t.Fatal(err)
	}
	heldC, goneC := watch(t, s, held.Key), watch(t, s, gone.Key)
	leasepostgres.WaitMarked(s)
	receive(t, "the mark of a released key", goneC)
	select {
	case <-heldC:
		t.Fatal("the watch of a held key woke up before its release")
	case <-time.After(100 * time.Millisecond):
	}
	if err := s.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	receive(t, "release of the held key", heldC)
}
