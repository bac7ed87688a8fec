package postgres_test

import (
	"context"
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
