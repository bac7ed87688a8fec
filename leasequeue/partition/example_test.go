package partition_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue/partition"
)

// Twelve partitions shared by the live workers of a group. Each handler
// writes with the partition's token, so a worker that lost the partition
// can't write any more.
func ExampleGroup_Run() {
	var (
		ctx    context.Context
		client *lease.Client
		roster partition.Roster // NewValkeyRoster, NewPostgresRoster, ...
		policy lease.Policy
		pool   *pgxpool.Pool
	)
	var partitions []string
	for i := range 12 {
		partitions = append(partitions, fmt.Sprintf("shard-%02d", i))
	}
	g, err := partition.New(client, partition.Options{
		Name: "billing", Partitions: partitions, Policy: policy, Roster: roster,
	})
	if err != nil {
		panic(err)
	}
	err = g.Run(ctx, func(ctx context.Context, p partition.Owned) error {
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
