package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformanceFakeClock(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	store := memory.New(memory.Options{Clock: clock})
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend: func(*testing.T) lease.Backend { return store },
		Clock:      clock,
	})
}

func TestConformanceRealTime(t *testing.T) {
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend: func(*testing.T) lease.Backend { return memory.New(memory.Options{}) },
		TTL:        time.Second,
	})
}

func TestWatchReleasesWakesWaiter(t *testing.T) {
	store := memory.New(memory.Options{})
	ctx := context.Background()
	holder, _ := lease.NewClient(store, lease.ClientOptions{Owner: "holder"})
	waiter, _ := lease.NewClient(store, lease.ClientOptions{Owner: "waiter"})
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute, Retry: 15 * time.Second, Wait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h, err := holder.Acquire(ctx, "k", p)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := waiter.Acquire(ctx, "k", p); done <- err }()
	time.Sleep(50 * time.Millisecond) // let the waiter find the lease held and start watching
	start := time.Now()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // well below Retry, which is 15s shortened by at most 20%
		t.Fatalf("the waiter was not woken by the release (waited %v)", time.Since(start))
	}
	store.Release(ctx, lease.Acquisition{Key: "k"}) // no watchers left: must not block
}
