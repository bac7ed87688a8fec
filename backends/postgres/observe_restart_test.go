package postgres_test

import (
	"context"
	"testing"
	"time"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// TestObserveAcrossRestart: an observer that never polls within the test
// (Poll 10 minutes) still reports the final state after the database
// restarted, since the listener listens again and wakes it: a release and
// a new grant made once the database is back are seen.
func TestObserveAcrossRestart(t *testing.T) {
	t.Parallel()
	srv := testserver.StartPostgres(t)
	s := newStore(t, newPool(t, srv.NewDatabase(t), nil), leasepostgres.Options{})
	ctx := ctxT(t)
	p := policy(t, lease.PolicyOptions{TTL: time.Hour})
	a, _ := lease.NewClient(s, lease.ClientOptions{Owner: "a"})
	h, err := a.TryAcquire(ctx, "job", p)
	if err != nil {
		t.Fatal(err)
	}
	obs, _ := lease.NewClient(s, lease.ClientOptions{Owner: "observer"})
	seen := observeAll(ctx, obs, "job")
	if o := nextObs(t, seen); o.Change != lease.ChangeInitial || o.Owner != "a" {
		t.Fatalf("first observation %v %+v, want a holding", o.Change, o.Record)
	}
	srv.StopImmediate()
	srv.Start()
	// End a's lease once the pool has reconnected (its first calls may
	// meet connections the restart closed).
	for {
		_, err := s.ForceRelease(ctx, "job", h.Token())
		if err == nil {
			break
		}
		t.Logf("force release after the restart: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := lease.NewClient(s, lease.ClientOptions{Owner: "b"})
	wait := policy(t, lease.PolicyOptions{TTL: time.Hour, Wait: 30 * time.Second, Retry: 100 * time.Millisecond})
	hb, err := b.Acquire(ctx, "job", wait)
	if err != nil {
		t.Fatal(err)
	}
	for {
		o := nextObs(t, seen)
		if o.Held && o.Owner == "b" && o.Token == hb.Token() {
			return
		}
		t.Logf("observed %v %+v", o.Change, o.Record)
	}
}

// observeAll ranges over c.Observe of key, with a poll that never comes
// within a test, and sends each observation on the channel.
func observeAll(ctx context.Context, c *lease.Client, key string) <-chan lease.Observation {
	out := make(chan lease.Observation, 100)
	go func() {
		for o, err := range c.Observe(ctx, key, lease.ObserveOptions{Poll: 10 * time.Minute}) {
			if err == nil {
				out <- o
			}
		}
	}()
	return out
}

// nextObs returns the next observation, failing t after 30s.
func nextObs(t *testing.T, ch <-chan lease.Observation) lease.Observation {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(30 * time.Second):
		t.Fatal("no observation within 30s: the final state was missed")
		return lease.Observation{}
	}
}
