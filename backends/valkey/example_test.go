package valkey_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/lease"
)

// addr is the Valkey server the examples use; TestExamples points it at
// the harness's server and runs them.
var addr = "127.0.0.1:6379"

func Example() {
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close() // the Store never closes it

	store, err := leasevalkey.New(client, leasevalkey.Options{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := store.Check(ctx); err != nil {
		log.Fatal(err) // e.g. maxmemory-policy allows evicting leases
	}

	leases, err := lease.NewClient(store, lease.ClientOptions{Owner: "example"})
	if err != nil {
		log.Fatal(err)
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	h, err := leases.TryAcquire(ctx, "example/job", policy)
	if errors.Is(err, lease.ErrNotAcquired) {
		fmt.Println("someone else runs the job:", err)
		return
	} else if err != nil {
		log.Fatal(err)
	}
	defer h.Release(context.WithoutCancel(ctx))
	fmt.Println("running the job under token", h.Token())
}

// ExampleStore_Guard shows the coordinates a guarded write compares.
func ExampleStore_Guard() {
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, _ := leasevalkey.New(client, leasevalkey.Options{})
	leases, _ := lease.NewClient(store, lease.ClientOptions{Owner: "example"})
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})

	ctx := context.Background()
	h, err := leases.TryAcquire(ctx, "cache/users", policy)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Release(context.WithoutCancel(ctx))
	g, err := store.Guard(h.Snapshot())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(g.Record(), g.Owner(), g.Token() == h.Token())
}
