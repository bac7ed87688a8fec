package main

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
	"github.com/golib/lease/lease"
)

// replicaEnv is what one replica needs: a lease backend on its own
// connection, and a fenced counter to write to.
type replicaEnv struct {
	backend lease.Backend
	// add adds one to the counter under snap's token, or fails with
	// fence.ErrStale if a newer holder already wrote.
	add   func(ctx context.Context, snap lease.Snapshot) error
	close func()
}

// dial returns a function that opens the environment of one replica on
// the backend cfg names: Valkey, PostgreSQL, or (neither) memory shared by
// the replicas of this process.
func dial(ctx context.Context, cfg config) (func() (*replicaEnv, error), error) {
	switch {
	case cfg.valkeyAddr != "":
		return func() (*replicaEnv, error) { return dialValkey(cfg.valkeyAddr) }, nil
	case cfg.postgresURL != "":
		if err := migrate(ctx, cfg.postgresURL); err != nil {
			return nil, err
		}
		return func() (*replicaEnv, error) { return dialPostgres(ctx, cfg.postgresURL) }, nil
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
			add: func(_ context.Context, snap lease.Snapshot) error {
				return fences.Do(snap, []string{"counter"}, func() error {
					mu.Lock()
					n++
					mu.Unlock()
					return nil
				})
			},
			close: func() {},
		}, nil
	}, nil
}

func dialValkey(addr string) (*replicaEnv, error) {
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	store, err := leasevalkey.New(client, leasevalkey.Options{Prefix: "example:scheduler:lease:"})
	if err != nil {
		client.Close()
		return nil, err
	}
	fences, err := fence.NewValkey(client, fence.ValkeyOptions{Prefix: "example:scheduler:fence:"})
	if err != nil {
		client.Close()
		return nil, err
	}
	return &replicaEnv{
		backend: store,
		add: func(ctx context.Context, snap lease.Snapshot) error {
			_, err := fences.Do(ctx, snap, "counter", fence.IncrBy("example:{counter}:value", 1))
			return err
		},
		close: client.Close,
	}, nil
}

// migrate creates the lease and fence tables and the example's counter.
func migrate(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		return err
	}
	if err := fence.Migrate(ctx, pool, fence.TableOptions{}); err != nil {
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
		add: func(ctx context.Context, snap lease.Snapshot) error {
			return fence.Tx(ctx, pool, snap, []string{"counter"}, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO example_counter (name, n) VALUES ('counter', 1)
					ON CONFLICT (name) DO UPDATE SET n = example_counter.n + 1`)
				return err
			})
		},
		close: func() { store.Close(); pool.Close() },
	}, nil
}

// String names the backend for the output.
func (c config) backendName() string {
	switch {
	case c.valkeyAddr != "":
		return fmt.Sprintf("Valkey at %s", c.valkeyAddr)
	case c.postgresURL != "":
		return "PostgreSQL"
	}
	return "the memory backend (replicas of one process)"
}
