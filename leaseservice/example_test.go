package leaseservice_test

import (
	"context"
	"fmt"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseservice"
)

// A singleton consumer: Run campaigns for the lease, runs the function
// while it holds it, and releases it when the function returns. Without
// Once it would campaign again; a real service runs until its context is
// cancelled at shutdown.
func ExampleRun() {
	backend := leasememory.New(leasememory.Options{})
	client, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "consumer/host-1"})
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})

	err := leaseservice.Run(context.Background(), client, "orders/consumer", policy,
		func(ctx context.Context, h *lease.Handle) error {
			// Consume until ctx is cancelled; pass h.Token() to every write.
			fmt.Println("consuming with token", h.Token())
			return nil
		},
		leaseservice.Options{
			Once:         true,
			OnTransition: func(tr leaseservice.Transition) { fmt.Println(tr.Kind, tr.Key) },
		})
	fmt.Println("Run:", err)
	// Output:
	// elected orders/consumer
	// consuming with token 1
	// released orders/consumer
	// Run: <nil>
}
