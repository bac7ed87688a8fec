package main

// This file opens, for each replica the example runs, a lease backend on a
// connection of its own and a fenced counter the replica writes to, on
// Valkey, on PostgreSQL, or in memory. It is setup: main.go shows how a
// replica uses them.

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	leasememory "github.com/golib/lease/backends/memory"
	leasepostgres "github.com/golib/lease/backends/postgres"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/lease"
)

// backendOptions name the backend the replicas run on: Valkey if ValkeyAddr is
// set, else PostgreSQL if PostgresURL is set, else memory shared by the
// replicas of this process.
type backendOptions struct {
	// ValkeyAddr is a Valkey server's host:port.
	ValkeyAddr string
	// PostgresURL is a PostgreSQL connection URL.
	PostgresURL string
	// Prefix starts the Valkey keys of the example's leases (Prefix +
	// "lease:") and fences (Prefix + "fence:"), so that examples run on one
	// server keep apart.
	Prefix string
}

// describe names the backend for an example's output.
func (o backendOptions) describe() string {
	switch {
	case o.ValkeyAddr != "":
		return fmt.Sprintf("Valkey at %s", o.ValkeyAddr)
	case o.PostgresURL != "":
		return "PostgreSQL"
	}
	return "the memory backend (replicas of one process)"
}

// replicaEnv is what one replica needs: a lease backend on its own
// connection, and a fenced counter to write to.
type replicaEnv struct {
	backend lease.Backend
	addFn   func(ctx context.Context, snap lease.Snapshot) error
	closeFn func()
}

// add adds one to the counter under snap's token, or fails with
// fence.ErrStale if a newer holder already wrote.
func (r *replicaEnv) add(ctx context.Context, snap lease.Snapshot) error {
	return r.addFn(ctx, snap)
}

// close closes the replica's connection.
func (r *replicaEnv) close() { r.closeFn() }

// dial returns a function that opens the environment of one replica on the
// backend o names. On PostgreSQL it first creates the lease and fence
// tables and the counter's table.
func dial(ctx context.Context, o backendOptions) (func() (*replicaEnv, error), error) {
	switch {
	case o.ValkeyAddr != "":
		return func() (*replicaEnv, error) { return dialValkey(o.ValkeyAddr, o.Prefix) }, nil
	case o.PostgresURL != "":
		if err := migrate(ctx, o.PostgresURL); err != nil {
			return nil, err
		}
		return func() (*replicaEnv, error) { return dialPostgres(ctx, o.PostgresURL) }, nil
	}
	store := leasememory.New(leasememory.Options{})
	var (
		fences fence.Memory
		mu     sync.Mutex
		n      int
	)
	return func() (*replicaEnv, error) {
		return &replicaEnv{
			backend: store,
			addFn: func(_ context.Context, snap lease.Snapshot) error {
				return fences.Do(snap, []string{"counter"}, func() error {
					mu.Lock()
					n++
					mu.Unlock()
					return nil
				})
			},
			closeFn: func() {},
		}, nil
	}, nil
}

func dialValkey(addr, prefix string) (*replicaEnv, error) {
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	store, err := leasevalkey.New(client, leasevalkey.Options{Prefix: prefix + "lease:"})
	if err != nil {
		client.Close()
		return nil, err
	}
	fences, err := fencevalkey.New(client, fencevalkey.Options{Prefix: prefix + "fence:"})
	if err != nil {
		client.Close()
		return nil, err
	}
	return &replicaEnv{
		backend: store,
		addFn: func(ctx context.Context, snap lease.Snapshot) error {
			_, err := fences.Do(ctx, snap, "counter", fencevalkey.IncrBy("example:{counter}:value", 1))
			return err
		},
		closeFn: client.Close,
	}, nil
}

// migrate creates the lease and fence tables and the examples' counter.
func migrate(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		return err
	}
	if err := fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{}); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_counter (name text PRIMARY KEY, n bigint NOT NULL)`)
	return err
}

func dialPostgres(ctx context.Context, url string) (*replicaEnv, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	store, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &replicaEnv{
		backend: store,
		addFn: func(ctx context.Context, snap lease.Snapshot) error {
			return fencepostgres.Tx(ctx, pool, snap, []string{"counter"}, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO example_counter (name, n) VALUES ('counter', 1)
					ON CONFLICT (name) DO UPDATE SET n = example_counter.n + 1`)
				return err
			})
		},
		closeFn: func() { store.Close(); pool.Close() },
	}, nil
}
