package leasequeue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

// TestClaimerLeaseEventsReachClientObserver checks that the lease events of
// a Claimer's item claims reach the observer of the client given to New,
// as the events of item leases on that client's own backend did.
func TestClaimerLeaseEventsReachClientObserver(t *testing.T) {
	var (
		mu       sync.Mutex
		released []string
	)
	obs := lease.ObserverFunc(func(e lease.Event) {
		if r, ok := e.(*lease.Released); ok {
			mu.Lock()
			released = append(released, r.Key)
			mu.Unlock()
		}
	})
	client, err := lease.NewClient(noBackend{t}, lease.ClientOptions{Owner: "w", Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	src := leasequeue.NewMemorySource(leasequeue.MemoryOptions{})
	ctx := context.Background()
	src.Enqueue("a")
	q, err := leasequeue.New(client, src, leasequeue.Options{Name: "fwd", Policy: newPolicy(t, lease.PolicyOptions{TTL: time.Minute})})
	if err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(released) != 1 || released[0] != q.Key("a") {
		t.Fatalf("the client's observer saw Released events for %q, want one for %q", released, q.Key("a"))
	}
}
