package leasetest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

// unwatched hides the memory backend's lease.ReleaseWatcher.
type unwatched struct{ lease.Backend }

func TestCountCallsCountsEachMethodAndKeepsTheWatcher(t *testing.T) {
	ctx := context.Background()
	mem := leasememory.New(leasememory.Options{})
	b, calls := leasetest.CountCalls(mem)
	w, ok := b.(lease.ReleaseWatcher)
	if !ok {
		t.Fatal("CountCalls of a lease.ReleaseWatcher is not one")
	}
	_, stop, err := w.WatchReleases(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	a := lease.Acquisition{Key: "k", Owner: "o", Nonce: "n"}
	if a.Token, err = b.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := b.Renew(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Inspect(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, a); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("second Release = %v, want the backend's own answer, ErrLost", err)
	}
	got := [...]int64{calls.Acquire.Load(), calls.Renew.Load(), calls.Release.Load(), calls.Inspect.Load(), calls.WatchReleases.Load(), calls.Total()}
	if want := [...]int64{1, 1, 2, 1, 1, 5}; got != want {
		t.Fatalf("Acquire, Renew, Release, Inspect, WatchReleases, Total = %v, want %v", got, want)
	}
	if b, _ := leasetest.CountCalls(unwatched{mem}); b != nil {
		if _, ok := b.(lease.ReleaseWatcher); ok {
			t.Fatal("CountCalls of a backend without release notifications is a lease.ReleaseWatcher")
		}
	}
}

// CountCalls shows how often code asks the backend: a waiter for a held
// key sleeps until the holder's lease would end, so in 5 minutes of a
// holder that keeps renewing a 1-minute lease it asks about once a minute.
func ExampleCountCalls() {
	ctx := context.Background()
	clock := leasetest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem := leasememory.New(leasememory.Options{Clock: clock})
	p, _ := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute, Wait: 5 * time.Minute})
	holder, _ := lease.NewClient(mem, lease.ClientOptions{Owner: "holder", Clock: clock})
	h, _ := holder.Acquire(ctx, "report", p)

	b, calls := leasetest.CountCalls(mem)
	waiter, _ := lease.NewClient(b, lease.ClientOptions{Owner: "waiter", Clock: clock})
	done := make(chan error, 1)
	go func() { _, err := waiter.Acquire(ctx, "report", p); done <- err }()
	for range 15 { // the holder renews every 20s for 5 minutes
		_ = clock.WaitForTimers(ctx, 1) // the waiter sleeps
		clock.Advance(20 * time.Second)
		_ = h.Renew(ctx)
	}
	err := <-done
	fmt.Println(errors.Is(err, lease.ErrNotAcquired), calls.Acquire.Load() <= 6)
	// Output: true true
}
