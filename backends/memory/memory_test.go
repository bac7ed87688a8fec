package memory_test

import (
	"context"
	"fmt"
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

func TestConformanceRetention(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend: func(*testing.T) lease.Backend { return memory.New(memory.Options{Clock: clock}) },
		NewRetentionBackend: func(*testing.T) lease.Backend {
			return memory.New(memory.Options{Clock: clock, Retention: time.Minute})
		},
		Retention: time.Minute,
		Clock:     clock,
	})
}

func TestConformanceRetentionRealTime(t *testing.T) {
	store := memory.New(memory.Options{Retention: 700 * time.Millisecond})
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend:          func(*testing.T) lease.Backend { return memory.New(memory.Options{}) },
		NewRetentionBackend: func(*testing.T) lease.Backend { return store },
		Retention:           700 * time.Millisecond,
		TTL:                 300 * time.Millisecond,
	})
}

// TestForgetsAsItAcquires checks that the Store's memory stays
// proportional to the keys in use without any sweep: records past their
// retention go as new keys come, and tokens still never go back.
func TestForgetsAsItAcquires(t *testing.T) {
	ctx := context.Background()
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	store := memory.New(memory.Options{Clock: clock, Retention: time.Hour})
	c, err := lease.NewClient(store, lease.ClientOptions{Owner: "o", Clock: clock, SweepEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]lease.Token{} // the day-0 keys' tokens
	for day := range 5 {
		for i := range 1000 {
			key := fmt.Sprintf("day%d/key%d", day, i)
			if day == 4 && i%2 == 0 {
				key = fmt.Sprintf("day0/key%d", i) // used again, after its record was forgotten
			}
			h, err := c.TryAcquire(ctx, key, p)
			if err != nil {
				t.Fatal(err)
			}
			if prev, ok := first[key]; ok && h.Token() <= prev {
				t.Fatalf("token of %q after its record was forgotten = %d, want above %d", key, h.Token(), prev)
			}
			if day == 0 {
				first[key] = h.Token()
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(2 * time.Hour)
	}
	recs, _, err := store.List(ctx, "", "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) > 2000 {
		t.Fatalf("the store keeps %d records after 5,000 keys were used, 1,000 a retention apart; want at most 2,000", len(recs))
	}
}
