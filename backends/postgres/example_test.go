package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/lease"
)

// databaseURL is the database the examples use; TestExamples points it at
// a fresh database of the harness's server and runs them.
var databaseURL = "postgres://app@localhost:5432/app"

func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close() // the Store never closes it

	// Create or upgrade the lease table; safe when replicas start together.
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		log.Fatal(err)
	}
	store, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

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

// ExampleCheckGuard writes only while the lease is held, in one
// transaction with the check.
func ExampleCheckGuard() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		log.Fatal(err)
	}
	store, _ := leasepostgres.New(pool, leasepostgres.Options{})
	defer store.Close()
	leases, _ := lease.NewClient(store, lease.ClientOptions{Owner: "example"})
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})

	h, err := leases.TryAcquire(ctx, "cache/users", policy)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Release(context.WithoutCancel(ctx))
	g, err := store.Guard(h.Snapshot())
	if err != nil {
		log.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := leasepostgres.CheckGuard(ctx, tx, g); err != nil {
			return err // *guard.NotCurrentError: the lease moved on
		}
		// ... writes that must happen under the lease ...
		return nil
	})
	fmt.Println("guarded transaction:", err)
}
