package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/guard"
	"github.com/golib/lease/lease"
)

// checkGuardTx runs CheckGuard in a transaction of its own.
func checkGuardTx(ctx context.Context, db leasepostgres.Beginner, g guard.Guard) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return leasepostgres.CheckGuard(ctx, tx, g) })
}

func TestGuard(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{Schema: "app", Table: `lease "records"`})
	ctx := ctxT(t)
	p := policy(t, lease.PolicyOptions{TTL: time.Minute})
	h, err := newClient(t, s, "writer").TryAcquire(ctx, "report", p)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Guard(h.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if g.Kind() != guard.Postgres || g.Record() != s.Table() || g.Token() != h.Token() {
		t.Fatalf("Guard = %+v", g)
	}
	if err := checkGuardTx(ctx, pool, g); err != nil {
		t.Fatalf("CheckGuard while held: %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err = checkGuardTx(ctx, pool, g)
	var nc *guard.NotCurrentError
	if !errors.As(err, &nc) || !errors.Is(err, guard.ErrNotCurrent) {
		t.Fatalf("CheckGuard after release: %v, want a *guard.NotCurrentError", err)
	}
	if _, err := newClient(t, s, "other").TryAcquire(ctx, "report", p); err != nil {
		t.Fatal(err)
	}
	if err := checkGuardTx(ctx, pool, g); !errors.Is(err, guard.ErrNotCurrent) {
		t.Fatalf("CheckGuard after another acquired: %v", err)
	}
	unknown, err := s.Guard(lease.Snapshot{Key: "never", Owner: "writer", Token: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkGuardTx(ctx, pool, unknown); !errors.Is(err, guard.ErrNotCurrent) {
		t.Fatalf("CheckGuard of an unknown key: %v", err)
	}
}

// TestGuardHoldsOffTakeover: while a transaction that checked the guard
// is open, an expired lease cannot be taken over; after it commits, it
// can.
func TestGuardHoldsOffTakeover(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "writer", Nonce: "n", TTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Guard(lease.Snapshot{Key: "k", Owner: "writer", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := leasepostgres.CheckGuard(ctx, tx, g); err != nil {
		t.Fatalf("CheckGuard: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // the lease expires on the database's clock
	takeover := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "other", Nonce: "m", TTL: time.Minute})
		takeover <- err
	}()
	select {
	case err := <-takeover:
		t.Fatalf("Acquire went through while a guarded transaction was open: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-takeover; err != nil {
		t.Fatalf("Acquire after the guarded transaction: %v", err)
	}
}

func TestCheckGuardRejectsForeignRecords(t *testing.T) {
	t.Parallel()
	snap := lease.Snapshot{Key: "k", Owner: "o", Token: 1}
	for _, g := range []func() (guard.Guard, error){
		func() (guard.Guard, error) { return guard.New(guard.Valkey, `"public"."leases"`, snap) },
		func() (guard.Guard, error) { return guard.New(guard.Postgres, `public.leases; DROP TABLE x`, snap) },
		func() (guard.Guard, error) { return guard.New(guard.Postgres, `"a"."b" WHERE false; --"`, snap) },
		func() (guard.Guard, error) { return guard.New(guard.Postgres, `"a"b"."c"`, snap) },
	} {
		g, err := g()
		if err != nil {
			t.Fatal(err)
		}
		// No statement is sent, so a nil transaction is enough.
		if err := leasepostgres.CheckGuard(context.Background(), nil, g); err == nil || errors.Is(err, guard.ErrNotCurrent) {
			t.Errorf("CheckGuard(%q, %q) = %v, want a refusal", g.Kind(), g.Record(), err)
		}
	}
}

// TestGuardDuringAnOffer: while a hand-off's offer stands, the row shows the
// old owner, the offered token and an expiry ahead (the window's end), but
// nobody holds the key: no guard passes, not even one with the offered
// token; the candidate's guard passes once it acquired.
func TestGuardDuringAnOffer(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	p := policy(t, lease.PolicyOptions{TTL: time.Minute})
	h, err := newClient(t, s, "writer").TryAcquire(ctx, "report", p)
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.Guard(h.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.HandOff(ctx, lease.Offer{Candidates: []string{"writer"}}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Inspect(ctx, "report")
	if err != nil || len(r.Candidates) == 0 {
		t.Fatalf("Inspect after HandOff = %+v, %v; want an offer", r, err)
	}
	offered, err := s.Guard(lease.Snapshot{Key: "report", Owner: "writer", Token: r.Token})
	if err != nil {
		t.Fatal(err)
	}
	for name, g := range map[string]guard.Guard{"the old acquisition": old, "the offered token": offered} {
		if err := checkGuardTx(ctx, pool, g); !errors.Is(err, guard.ErrNotCurrent) {
			t.Fatalf("CheckGuard of %s during the offer = %v, want ErrNotCurrent", name, err)
		}
	}
	next, err := newClient(t, s, "writer").TryAcquire(ctx, "report", p)
	if err != nil || next.Token() != r.Token {
		t.Fatalf("the candidate's TryAcquire = %v, %v; want the offered token %d", next, err, r.Token)
	}
	if err := checkGuardTx(ctx, pool, offered); err != nil {
		t.Fatalf("CheckGuard of the candidate's acquisition: %v", err)
	}
}
