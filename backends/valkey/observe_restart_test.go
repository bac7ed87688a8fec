package valkey_test

import (
	"context"
	"testing"
	"time"

	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// The observer tests use a poll that never comes within a test (10
// minutes): an observer reports the final state after a restart or a
// failover only if its change watch subscribed again and woke it.

// observeAll ranges over c.Observe of key and sends each observation on
// the channel.
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

// until returns once an observation shows owner holding token, failing t
// if none does within 30s.
func until(t *testing.T, ch <-chan lease.Observation, owner string, token lease.Token) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case o := <-ch:
			if o.Held && o.Owner == owner && o.Token == token {
				return
			}
			t.Logf("observed %v %+v", o.Change, o.Record)
		case <-timeout:
			t.Fatalf("no observation of %s holding token %d within 30s: the final state was missed", owner, token)
		}
	}
}

// TestObserveAcrossRestart: a restart without persistence frees the key;
// the observer, woken when its subscription is back, sees the key's next
// holder.
func TestObserveAcrossRestart(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	s := newStore(t, newClient(t, srv.Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := holdHandover(t, s)
	obs, _ := lease.NewClient(s, lease.ClientOptions{Owner: "observer"})
	seen := observeAll(ctx, obs, "handover")
	until(t, seen, "holder", h.Token())
	srv.Kill()
	srv.Restart()
	next, _ := lease.NewClient(s, lease.ClientOptions{Owner: "next"})
	p, _ := lease.NewPolicy(lease.PolicyOptions{TTL: time.Hour, Wait: 20 * time.Second, Retry: 100 * time.Millisecond})
	hn, err := next.Acquire(ctx, "handover", p)
	if err != nil {
		t.Fatalf("Acquire after the restart: %v", err)
	}
	until(t, seen, "next", hn.Token())
}

// TestObserveAcrossClusterFailover: after a failover moves the key's slot
// to the promoted replica, whose node ends the old subscription, the
// observer subscribes again and sees the hand-over made on the new
// primary.
func TestObserveAcrossClusterFailover(t *testing.T) {
	t.Parallel()
	cl := testserver.StartValkeyCluster(t, 1)
	replica := cl.AddReplica(t, 0)
	c := newClient(t, cl.Addrs()...)
	s := newStore(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := holdHandover(t, s)
	obs, _ := lease.NewClient(s, lease.ClientOptions{Owner: "observer"})
	seen := observeAll(ctx, obs, "handover")
	until(t, seen, "holder", h.Token())
	awaitSubscribed(t, c, s)
	cl.Failover(t, replica)
	if err := h.HandOff(ctx, lease.Offer{Candidates: []string{"next"}}); err != nil {
		t.Fatalf("HandOff on the promoted replica: %v", err)
	}
	next, _ := lease.NewClient(s, lease.ClientOptions{Owner: "next"})
	p, _ := lease.NewPolicy(lease.PolicyOptions{TTL: time.Hour, Wait: 20 * time.Second, Retry: 100 * time.Millisecond})
	hn, err := next.Acquire(ctx, "handover", p)
	if err != nil {
		t.Fatalf("the candidate's Acquire after the failover: %v", err)
	}
	until(t, seen, "next", hn.Token())
}
