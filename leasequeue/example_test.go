package leasequeue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasetest"
)

// Two workers and one item, on the memory backend and a fake clock: a
// worker that stalls past its lease loses the item to another, and can no
// longer complete it.
func Example() {
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	clock := leasetest.NewFakeClock(start) // the backend's clock, and worker B's
	backend := leasememory.New(leasememory.Options{Clock: clock})
	items := leasequeue.NewMemorySource(leasequeue.MemoryOptions{Clock: clock})
	items.Enqueue("invoice-42")
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	worker := func(name string, clock lease.Clock) *leasequeue.Queue {
		client, err := lease.NewClient(backend, lease.ClientOptions{Owner: name, Clock: clock})
		if err != nil {
			panic(err)
		}
		q, err := leasequeue.New(client, items, leasequeue.Options{Name: "invoices", Policy: policy})
		if err != nil {
			panic(err)
		}
		return q
	}
	// Worker A's clock stands still: a process paused by the OS.
	a := worker("worker-a", leasetest.NewFakeClock(start))
	b := worker("worker-b", clock)
	ctx := context.Background()

	ca, err := a.Claim(ctx, "invoice-42")
	if err != nil {
		panic(err)
	}
	fmt.Printf("A claimed %s: attempt %d, token %d\n", ca.ID(), ca.Attempt(), ca.Snapshot().Token)
	if _, err := b.Claim(ctx, "invoice-42"); errors.Is(err, lease.ErrNotAcquired) {
		fmt.Println("B can't claim it while A holds it")
	}

	clock.Advance(time.Minute) // A's lease expires on the backend's clock
	cb, err := b.Claim(ctx, "invoice-42")
	if err != nil {
		panic(err)
	}
	fmt.Printf("B claimed %s: attempt %d, token %d\n", cb.ID(), cb.Attempt(), cb.Snapshot().Token)

	err = ca.Complete(ctx) // A wakes up and tries to finish
	fmt.Println("A's completion is refused as stale:", errors.Is(err, fence.ErrStale))
	if err := cb.Complete(ctx); err != nil {
		panic(err)
	}
	it, _ := items.Item("invoice-42")
	fmt.Printf("%s is %s, by %s with token %d\n", it.ID, it.State, it.Owner, it.Token)
	// Output:
	// A claimed invoice-42: attempt 1, token 1
	// B can't claim it while A holds it
	// B claimed invoice-42: attempt 2, token 2
	// A's completion is refused as stale: true
	// invoice-42 is done, by worker-b with token 2
}

// A worker loop on a PostgreSQL jobs table: each item is completed in the
// same transaction as the handler's own writes, under the item's fence.
func ExampleQueue_Run() {
	var (
		ctx    context.Context // ends at shutdown
		pool   *pgxpool.Pool   // the application's pool
		client *lease.Client   // leases on any backend
		policy lease.Policy
	)
	// Once, at start-up, on every replica: create or upgrade the tables.
	if err := leasequeue.MigratePostgres(ctx, pool, leasequeue.PostgresOptions{}); err != nil {
		panic(err)
	}
	emails, err := leasequeue.NewPostgresSource(pool, "emails", leasequeue.PostgresOptions{})
	if err != nil {
		panic(err)
	}
	q, err := leasequeue.New(client, emails, leasequeue.Options{Name: "emails", Policy: policy, Concurrency: 8})
	if err != nil {
		panic(err)
	}
	err = q.Run(ctx, func(ctx context.Context, c *leasequeue.Claim) error {
		// ... send the email with ID c.ID(), stopping if ctx ends ...
		return emails.CompleteTx(ctx, c, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE emails SET sent_at = now() WHERE id = $1", c.ID())
			return err
		})
	})
	if err != nil {
		panic(err)
	}
}

// Twelve partitions shared by the live workers of a group. Each handler
// writes with the partition's token, so a worker that lost the partition
// can't write any more.
func ExampleGroup_Run() {
	var (
		ctx    context.Context
		client *lease.Client
		roster leasequeue.Roster // NewValkeyRoster, NewPostgresRoster, ...
		policy lease.Policy
		pool   *pgxpool.Pool
	)
	var partitions []string
	for i := range 12 {
		partitions = append(partitions, fmt.Sprintf("shard-%02d", i))
	}
	g, err := leasequeue.NewGroup(client, leasequeue.GroupOptions{
		Name: "billing", Partitions: partitions, Policy: policy, Roster: roster,
	})
	if err != nil {
		panic(err)
	}
	err = g.Run(ctx, func(ctx context.Context, p leasequeue.Partition) error {
		for ctx.Err() == nil { // until the partition is revoked or lost
			err := fencepostgres.Tx(ctx, pool, p.Snapshot, []string{p.Name}, func(tx pgx.Tx) error {
				// ... process the shard's next batch ...
				return nil
			})
			if errors.Is(err, fence.ErrStale) {
				return err // another worker owns the shard now
			}
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
}
