package cache_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/cache"
	"github.com/golib/lease/guard"
	"github.com/golib/lease/lease"
)

// The examples need a Valkey server; they compile but do not run as
// tests. examples/cache runs the same code against real servers.

func Example() {
	ctx := context.Background()
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := leasevalkey.New(client, leasevalkey.Options{})
	if err != nil {
		log.Fatal(err)
	}
	leases, err := lease.NewClient(store, lease.ClientOptions{Owner: "web/host-1"})
	if err != nil {
		log.Fatal(err)
	}
	pages, err := cache.New(client, leases, cache.Options{TTL: time.Minute, StaleFor: time.Hour})
	if err != nil {
		log.Fatal(err)
	}

	page, info, err := pages.Get(ctx, "page:/home", func(ctx context.Context, token lease.Token) ([]byte, error) {
		return []byte("<h1>Home</h1>"), nil // render from the database
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (%v)\n", page, info.Outcome)

	// After the page's data changed and was committed:
	if err := pages.Invalidate(ctx, "page:/home"); err != nil {
		log.Fatal(err)
	}
}

// A refresh outside Get: acquire the entry's refresh lease yourself and
// publish guarded by it.
func ExampleCache_Publish() {
	ctx := context.Background()
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, _ := leasevalkey.New(client, leasevalkey.Options{})
	leases, _ := lease.NewClient(store, lease.ClientOptions{Owner: "rates-refresher"})
	rates, _ := cache.New(client, leases, cache.Options{TTL: 10 * time.Minute})
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})

	h, err := leases.TryAcquire(ctx, rates.LeaseKey("fx/EUR"), policy)
	if errors.Is(err, lease.ErrNotAcquired) {
		return // another replica refreshes it
	} else if err != nil {
		log.Fatal(err)
	}
	defer h.Release(context.WithoutCancel(ctx))
	g, err := store.Guard(h.Snapshot())
	if err != nil {
		log.Fatal(err)
	}
	value := []byte("1.0842") // fetched from the upstream API
	switch err := rates.Publish(ctx, g, "fx/EUR", value, 0); {
	case errors.Is(err, guard.ErrNotCurrent):
		log.Print("another refresher took over; nothing published")
	case errors.Is(err, cache.ErrInvalidated):
		log.Print("the entry was invalidated while fetching; nothing published")
	case err != nil:
		log.Fatal(err)
	}
}

// The invalidation marks end with the lease records: build the Sweeper
// before the lease client, give it in ClientOptions.Sweepers, and the
// client sweeps both in the background.
func ExampleNewSweeper() {
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := leasevalkey.New(client, leasevalkey.Options{})
	if err != nil {
		log.Fatal(err)
	}
	marks, err := cache.NewSweeper(client, store, cache.DefaultPrefix)
	if err != nil {
		log.Fatal(err)
	}
	leases, err := lease.NewClient(store, lease.ClientOptions{Owner: "web/host-1", Sweepers: []lease.Sweeper{marks}})
	if err != nil {
		log.Fatal(err)
	}
	pages, err := cache.New(client, leases, cache.Options{TTL: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	_ = pages

	// Or now, under the sweep lease: the Store's records, then the marks.
	n, err := leases.Sweep(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "removed")
}
