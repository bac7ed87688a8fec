package leaseservice_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
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

// A function that fails is run again after a pause; HealthHandler serves
// the service's Check, as client-go's healthz adaptor does.
func ExampleHealthHandler() {
	var (
		client *lease.Client // on a Valkey or PostgreSQL backend
		policy lease.Policy
		run    leaseservice.Func
		ctx    context.Context
	)
	// docs:begin health
	svc, err := leaseservice.New(client, "orders/consumer", policy, run, leaseservice.Options{
		// The defaults, spelled out: after a failure, release the lease,
		// wait 1s, 2s, 4s ... up to 1m, and run the function again.
		RestartDelay:    time.Second,
		MaxRestartDelay: time.Minute,
		OnTransition: func(tr leaseservice.Transition) {
			if tr.Kind == leaseservice.Failed {
				log.Printf("%s failed: %v; running it again in %v", tr.Key, tr.Err, tr.RestartIn)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	go svc.Run(ctx)
	// 503 while this replica should campaign or renew and does not.
	http.Handle("/healthz", leaseservice.HealthHandler(svc.Check))
	// docs:end health
}
