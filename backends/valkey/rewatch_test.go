package valkey_test

import (
	"context"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// A waiting Acquire hears of releases through a subscription, which the
// server can end or lose: a restart loses it (valkey-go subscribes again),
// and a cluster node that gives up the key's hash slot, in a failover or
// a slot migration, ends it with SUNSUBSCRIBE (valkey-go does not
// subscribe again). In the waiter tests the waiter retries only every 10
// minutes, so it is granted within the test's time only if its watch
// survives and wakes it.

// waiter starts a client's Acquire of "handover" that is granted only if
// a release wakes it, and returns the channel that receives its result
// once granted (nil) or failed.
func waiter(t *testing.T, s *leasevalkey.Store) <-chan error {
	t.Helper()
	lc, _ := lease.NewClient(s, lease.ClientOptions{Owner: "waiter"})
	wait, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Hour, Retry: 10 * time.Minute, Wait: 20 * time.Minute, OperationTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	got := make(chan error, 1)
	go func() {
		h, err := lc.Acquire(ctx, "handover", wait)
		if err == nil {
			err = h.Release(context.Background())
		}
		got <- err
	}()
	return got
}

// holdHandover acquires "handover" for an hour.
func holdHandover(t *testing.T, s *leasevalkey.Store) *lease.Handle {
	t.Helper()
	lc, _ := lease.NewClient(s, lease.ClientOptions{Owner: "holder"})
	hold, _ := lease.NewPolicy(lease.PolicyOptions{TTL: time.Hour})
	h, err := lc.TryAcquire(ctxT(t), "handover", hold)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// awaitSubscribed waits until the release channel of "handover" has a
// subscriber.
func awaitSubscribed(t *testing.T, c valkey.Client, s *leasevalkey.Store) {
	t.Helper()
	ctx := ctxT(t)
	for numSub(t, c, s) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the waiting Acquire never subscribed to releases")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// granted fails t unless the waiter's Acquire succeeds.
func granted(t *testing.T, got <-chan error, after string, since time.Time) {
	t.Helper()
	if err := <-got; err != nil {
		t.Fatalf("waiting Acquire, %s: %v", after, err)
	}
	t.Logf("waiter granted %v after %s", time.Since(since).Round(time.Millisecond), after)
}

// TestWatchWokenAfterRestart watches the store's release channel itself:
// a client's attempt right after the restart may still meet the dead
// connection and then wait its Retry, which would say nothing about the
// watch.
func TestWatchWokenAfterRestart(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	c := newClient(t, srv.Addr())
	s := newStore(t, c)
	holdHandover(t, s)
	ch, stop, err := s.WatchReleases(ctxT(t), "handover")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := ctxT(t)
	select {
	case <-ch: // the subscription is in place
	case <-ctx.Done():
		t.Fatal("the watch was not woken when its subscription was confirmed")
	}
	srv.Kill()
	srv.Restart() // empty: the holder's record is gone, the key is free
	start := time.Now()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("the watch was not woken once its subscription was back after a restart that freed the key")
	}
	t.Logf("watch woken %v after the restart", time.Since(start).Round(time.Millisecond))
	lc, _ := lease.NewClient(s, lease.ClientOptions{Owner: "next"})
	p, _ := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute, Wait: 10 * time.Second})
	if _, err := lc.Acquire(ctxT(t), "handover", p); err != nil {
		t.Fatalf("Acquire after the restart: %v", err)
	}
}

func TestWaiterWokenAfterClusterFailover(t *testing.T) {
	t.Parallel()
	cl := testserver.StartValkeyCluster(t, 1)
	replica := cl.AddReplica(t, 0)
	c := newClient(t, cl.Addrs()...)
	s := newStore(t, c)
	h := holdHandover(t, s)
	got := waiter(t, s)
	awaitSubscribed(t, c, s)
	cl.Failover(t, replica)
	start := time.Now()
	if err := h.Release(ctxT(t)); err != nil {
		t.Fatalf("the holder's Release on the promoted replica: %v", err)
	}
	granted(t, got, "a release on the replica promoted by a failover", start)
}

func TestWaiterWokenAfterSlotMigration(t *testing.T) {
	t.Parallel()
	cl := testserver.StartValkeyCluster(t, 2)
	c := newClient(t, cl.Addrs()...)
	s := newStore(t, c)
	h := holdHandover(t, s)
	got := waiter(t, s)
	awaitSubscribed(t, c, s)
	slot, err := c.Do(ctxT(t), c.B().ClusterKeyslot().Key(s.RecordKey("handover")).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	cl.MoveSlot(t, int(slot), 1-int(slot)*2/16384)
	start := time.Now()
	if err := h.Release(ctxT(t)); err != nil {
		t.Fatalf("the holder's Release after the slot moved: %v", err)
	}
	granted(t, got, "a release after the key's slot moved to another node", start)
}
