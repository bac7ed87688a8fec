package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/lease"
)

// TestForceReleaseReportsOnlyWhatItEnded holds up ForceRelease behind an
// acquisition that commits after the statement's snapshot: a third
// connection holds the key's row lock while the next holder's Acquire
// and ForceRelease(key, 0) queue behind it. ForceRelease's snapshot shows
// the key free, so it ends nothing, and it must not report the holder
// whose acquisition it read afterwards as the one it ended.
func TestForceReleaseReportsOnlyWhatItEnded(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	const key = "job/force"
	var err error
	first := lease.Acquisition{Key: key, Owner: "first", Nonce: "first-nonce"}
	if first.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: first.Owner, Nonce: first.Nonce, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, first); err != nil {
		t.Fatal(err)
	}

	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(context.Background()) }()
	if _, err := blocker.Exec(ctx, `SELECT 1 FROM public.leases WHERE key = $1 FOR UPDATE`, key); err != nil {
		t.Fatal(err)
	}

	next := lease.Acquisition{Key: key, Owner: "next", Nonce: "next-nonce"}
	granted := make(chan error, 1)
	go func() {
		tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: next.Owner, Nonce: next.Nonce, TTL: time.Minute})
		next.Token = tok
		granted <- err
	}()
	waitForLockWaiters(t, pool, 1)
	type result struct {
		prev lease.Record
		err  error
	}
	forced := make(chan result, 1)
	go func() {
		prev, err := s.ForceRelease(ctx, key, 0)
		forced <- result{prev, err}
	}()
	waitForLockWaiters(t, pool, 2)
	if err := blocker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("the next holder's Acquire: %v", err)
	}
	r := <-forced
	if r.err != nil {
		t.Fatalf("ForceRelease: %v", r.err)
	}
	renewed := s.Renew(ctx, next, time.Minute)
	switch {
	case r.prev.Held && renewed == nil:
		t.Fatalf("ForceRelease reported ending %q (token %d), who then renewed: it ended nothing", r.prev.Owner, r.prev.Token)
	case !r.prev.Held && renewed != nil:
		t.Fatalf("ForceRelease reported nothing held, but the next holder's Renew failed: %v", renewed)
	}
	t.Logf("ForceRelease returned %+v; the next holder's Renew: %v", r.prev, renewed)
}

// waitForLockWaiters waits until at least n sessions of the test's
// database wait for a lock.
func waitForLockWaiters(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		err := pool.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a lock after 30s, want %d", waiting, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestForceReleaseMarksItsTime: the expiry a forced release writes is two
// thousand years before the statement, which is how Sweep finds its end.
func TestForceReleaseMarksItsTime(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if _, err := s.ForceRelease(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	var end time.Time
	if err := pool.QueryRow(ctx, "SELECT expires_at + interval '17520000 hours' FROM public.leases WHERE key = 'k'").Scan(&end); err != nil {
		t.Fatal(err)
	}
	if end.Before(before.Add(-time.Second)) || end.After(after.Add(time.Second)) {
		t.Fatalf("the forced release's end reads %v, want between %v and %v", end, before, after)
	}
}

func isLost(err error, reason lease.LostReason) bool {
	le, ok := errors.AsType[*lease.LostError](err)
	return ok && le.Reason == reason
}

// TestLegacyForceReleaseMarker: a row whose expiry is the Unix epoch, as
// the previous version's forced release wrote it, still tells its holder
// that an operator ended it.
func TestLegacyForceReleaseMarker(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	a := lease.Acquisition{Key: "legacy", Owner: "o", Nonce: "n"}
	var err error
	if a.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE public.leases SET expires_at = to_timestamp(0) WHERE key = $1", a.Key); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, a, time.Minute); !isLost(err, lease.ForceReleased) {
		t.Fatalf("Renew = %v, want force released", err)
	}
	if err := s.Release(ctx, a); !isLost(err, lease.ForceReleased) {
		t.Fatalf("Release = %v, want force released", err)
	}
	if _, err := s.ForceRelease(ctx, a.Key, a.Token); !isLost(err, lease.ForceReleased) {
		t.Fatalf("ForceRelease by token = %v, want force released", err)
	}
}
