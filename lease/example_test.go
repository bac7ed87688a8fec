package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

func Example() {
	ctx := context.Background()
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	backend := leasememory.New(leasememory.Options{Clock: clock})

	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	a, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-a", Clock: clock})
	b, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-b", Clock: clock})

	h, err := a.Acquire(ctx, "billing/nightly", policy)
	if err != nil {
		panic(err)
	}
	fmt.Println("worker-a holds token", h.Token())

	_, err = b.TryAcquire(ctx, "billing/nightly", policy)
	fmt.Println("worker-b:", err)
	fmt.Println("is ErrNotAcquired:", errors.Is(err, lease.ErrNotAcquired))

	if err := h.Release(ctx); err != nil {
		panic(err)
	}
	h2, err := b.TryAcquire(ctx, "billing/nightly", policy)
	if err != nil {
		panic(err)
	}
	fmt.Println("worker-b holds token", h2.Token())
	// Output:
	// worker-a holds token 1
	// worker-b: lease: acquire "billing/nightly": held by "worker-a" (token 1) for another 30s
	// is ErrNotAcquired: true
	// worker-b holds token 2
}

func ExampleHandle_StartManaged() {
	ctx := context.Background()
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	backend := leasememory.New(leasememory.Options{Clock: clock})
	client, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-a", Clock: clock})
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})

	h, err := client.Acquire(ctx, "reports/daily", policy)
	if err != nil {
		panic(err)
	}
	defer h.Release(context.WithoutCancel(ctx)) // runs last: free the key
	m, err := h.StartManaged(ctx)
	if err != nil {
		panic(err)
	}
	defer m.Stop(context.WithoutCancel(ctx)) // runs first: stop renewing

	// The protected work runs under m.Context(): it is cancelled the moment
	// the lease is lost.
	work := m.Context()
	select {
	case <-work.Done():
		fmt.Println("lost:", context.Cause(work))
	default:
		fmt.Println("working under token", h.Token())
	}
	// Output:
	// working under token 1
}

func ExampleNewPolicy() {
	_, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, RenewEvery: 25 * time.Second})
	fmt.Println(err)
	// Output:
	// lease: invalid policy: RenewEvery (25s) + Retry (100ms) + 2×OperationTimeout (3s) = 31.1s must not exceed TTL−SafetyMargin (25s), so that a renewal that times out can still be retried before the local deadline
}
