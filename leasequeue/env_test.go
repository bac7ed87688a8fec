package leasequeue_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	leasememory "github.com/golib/lease/backends/memory"
	leasepostgres "github.com/golib/lease/backends/postgres"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasequeue/partition"
)

// A source is a leasequeue.Source with the ready-made sources' extras.
type source interface {
	leasequeue.Claimer
	Enqueue(ctx context.Context, ids ...string) (int, error)
	Item(ctx context.Context, id string) (leasequeue.Item, error)
}

// A store is one kind of server as the tests use it: lease backends,
// sources and rosters on it, and fenced writes to judge the workers by.
type store struct {
	name string
	// backend returns a lease backend for one worker, on a connection of
	// its own where the server has connections.
	backend func(t testing.TB) lease.Backend
	// source returns the source of queue.
	source func(t testing.TB, queue string) source
	// retaining returns the source of queue that keeps done and dead
	// items for the given retentions (see PostgresOptions.DoneRetention).
	retaining func(t testing.TB, queue string, done, dead time.Duration) source
	// roster returns a roster.
	roster func(t testing.TB) partition.Roster
	// completeWith completes c with a fenced effect recorded atomically
	// with the completion; completions counts the effects per item.
	completeWith func(ctx context.Context, src source, c *leasequeue.Claim) error
	completions  func(ctx context.Context, src source, ids []string) (map[string]int, error)
	// write makes a fenced write for partition under snap; it reports
	// false when the fence refused snap as stale. accepted returns the
	// tokens of the accepted writes of partition, in the order the server
	// applied them.
	write    func(ctx context.Context, snap lease.Snapshot, partition string) (bool, error)
	accepted func(ctx context.Context, partition string) ([]lease.Token, error)
}

// stores lists the constructors of the stores on real servers.
var stores = []struct {
	name string
	make func(t testing.TB) *store
}{
	{"valkey", valkeyStore},
	{"postgres", postgresStore},
}

// forEachSource runs f as a parallel subtest on the memory store (system
// clock) and on each real store.
func forEachSource(t *testing.T, f func(t *testing.T, s *store)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		f(t, memoryStore(nil))
	})
	forEachStore(t, f)
}

// forEachStore runs f as a parallel subtest on each real store.
func forEachStore(t *testing.T, f func(t *testing.T, s *store)) {
	t.Helper()
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			f(t, k.make(t))
		})
	}
}

// memorySource adapts a MemorySource to source.
type memorySource struct{ *leasequeue.MemorySource }

func (s memorySource) Enqueue(_ context.Context, ids ...string) (int, error) {
	return s.MemorySource.Enqueue(ids...), nil
}

func (s memorySource) Item(_ context.Context, id string) (leasequeue.Item, error) {
	it, ok := s.MemorySource.Item(id)
	if !ok {
		return it, leasequeue.ErrNotFound
	}
	return it, nil
}

// memoryStore is a store in this process on clock; every worker shares
// one backend.
func memoryStore(clock lease.Clock) *store {
	b := leasememory.New(leasememory.Options{Clock: clock})
	roster := &partition.MemoryRoster{}
	s := &store{
		name:    "memory",
		backend: func(testing.TB) lease.Backend { return b },
		retaining: func(_ testing.TB, _ string, done, dead time.Duration) source {
			return memorySource{leasequeue.NewMemorySource(leasequeue.MemoryOptions{Clock: clock, DoneRetention: done, DeadRetention: dead})}
		},
		roster: func(testing.TB) partition.Roster { return roster },
	}
	s.source = func(t testing.TB, queue string) source { return s.retaining(t, queue, 0, 0) }
	return s
}

var prefixes atomic.Int64

// valkeyStore is a store on the shared Valkey server, under a key prefix
// of its own.
func valkeyStore(t testing.TB) *store {
	t.Helper()
	return valkeyStoreAt(t, []string{testserver.Valkey(t).Addr()})
}

// valkeyClusterStore is a store on the shared Valkey cluster.
func valkeyClusterStore(t testing.TB) *store {
	t.Helper()
	s := valkeyStoreAt(t, testserver.ValkeyCluster(t).Addrs())
	s.name = "valkey-cluster"
	return s
}

func valkeyStoreAt(t testing.TB, addrs []string) *store {
	t.Helper()
	prefix := fmt.Sprintf("lq%d-%d:", time.Now().UnixNano()%1e6, prefixes.Add(1))
	shared := valkeyClient(t, addrs)
	fences, err := fencevalkey.New(shared, fencevalkey.Options{Prefix: prefix + "judge:"})
	if err != nil {
		t.Fatal(err)
	}
	logKey := func(partition string) string { return prefix + "judge:{" + partition + "}:log" }
	s := &store{
		name: "valkey",
		backend: func(t testing.TB) lease.Backend {
			t.Helper()
			s, err := leasevalkey.New(valkeyClient(t, addrs), leasevalkey.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		retaining: func(t testing.TB, queue string, done, dead time.Duration) source {
			t.Helper()
			s, err := leasequeue.NewValkeySource(shared, queue, leasequeue.ValkeyOptions{Prefix: prefix, DoneRetention: done, DeadRetention: dead})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		roster: func(t testing.TB) partition.Roster {
			t.Helper()
			r, err := partition.NewValkeyRoster(shared, leasequeue.ValkeyOptions{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			return r
		},
		completeWith: func(ctx context.Context, src source, c *leasequeue.Claim) error {
			s := src.(*leasequeue.ValkeySource)
			return s.CompleteClaimWith(ctx, c, fencevalkey.IncrBy(s.ItemKey(c.ID(), "completions"), 1))
		},
		completions: func(ctx context.Context, src source, ids []string) (map[string]int, error) {
			s := src.(*leasequeue.ValkeySource)
			cmds := make(valkey.Commands, len(ids))
			for i, id := range ids {
				cmds[i] = shared.B().Get().Key(s.ItemKey(id, "completions")).Build()
			}
			out := make(map[string]int)
			for i, r := range shared.DoMulti(ctx, cmds...) {
				n, err := r.AsInt64()
				if err != nil && !valkey.IsValkeyNil(err) {
					return nil, err
				}
				out[ids[i]] = int(n)
			}
			return out, nil
		},
		write: func(ctx context.Context, snap lease.Snapshot, partition string) (bool, error) {
			_, err := fences.Do(ctx, snap, partition, fencevalkey.XAdd(logKey(partition), fencevalkey.XAddOptions{}, "token", snap.Token.String()))
			if errors.Is(err, fence.ErrStale) {
				return false, nil
			}
			return err == nil, err
		},
		accepted: func(ctx context.Context, partition string) ([]lease.Token, error) {
			entries, err := shared.Do(ctx, shared.B().Xrange().Key(logKey(partition)).Start("-").End("+").Build()).AsXRange()
			if err != nil {
				return nil, err
			}
			var out []lease.Token
			for _, e := range entries {
				var tok uint64
				if _, err := fmt.Sscan(e.FieldValues["token"], &tok); err != nil {
					return nil, err
				}
				out = append(out, lease.Token(tok))
			}
			return out, nil
		},
	}
	s.source = func(t testing.TB, queue string) source { return s.retaining(t, queue, 0, 0) }
	return s
}

// valkeyClient returns a client of the server(s) at addrs, closed when t
// ends.
func valkeyClient(t testing.TB, addrs []string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey.NewClient(%v): %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// postgresStore is a store on a fresh database of the shared PostgreSQL
// server.
func postgresStore(t testing.TB) *store {
	t.Helper()
	url := testserver.Postgres(t).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := pgPool(t, url, 8)
	if err := leasepostgres.Migrate(ctx, admin, leasepostgres.Options{}); err != nil {
		t.Fatalf("leasepostgres.Migrate: %v", err)
	}
	if err := fencepostgres.Migrate(ctx, admin, fencepostgres.TableOptions{}); err != nil {
		t.Fatalf("fencepostgres.Migrate: %v", err)
	}
	if err := leasequeue.MigratePostgres(ctx, admin, leasequeue.PostgresOptions{}); err != nil {
		t.Fatalf("leasequeue.MigratePostgres: %v", err)
	}
	_, err := admin.Exec(ctx, `
CREATE TABLE writes (seq bigserial PRIMARY KEY, partition text NOT NULL, token bigint NOT NULL);
CREATE TABLE completions (item text NOT NULL, token bigint NOT NULL)`)
	if err != nil {
		t.Fatalf("create the judge's tables: %v", err)
	}
	s := &store{
		name: "postgres",
		backend: func(t testing.TB) lease.Backend {
			t.Helper()
			s, err := leasepostgres.New(pgPool(t, url, 4), leasepostgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() }) // before the pool closes
			return s
		},
		retaining: func(t testing.TB, queue string, done, dead time.Duration) source {
			t.Helper()
			s, err := leasequeue.NewPostgresSource(admin, queue, leasequeue.PostgresOptions{DoneRetention: done, DeadRetention: dead})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		roster: func(t testing.TB) partition.Roster {
			t.Helper()
			r, err := partition.NewPostgresRoster(admin, leasequeue.PostgresOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return r
		},
		completeWith: func(ctx context.Context, src source, c *leasequeue.Claim) error {
			return src.(*leasequeue.PostgresSource).CompleteTx(ctx, c, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO completions (item, token) VALUES ($1, $2)`, c.ID(), int64(c.Snapshot().Token))
				return err
			})
		},
		completions: func(ctx context.Context, _ source, _ []string) (map[string]int, error) {
			rows, err := admin.Query(ctx, `SELECT item, count(*) FROM completions GROUP BY item`)
			if err != nil {
				return nil, err
			}
			out := make(map[string]int)
			var (
				item string
				n    int
			)
			_, err = pgx.ForEachRow(rows, []any{&item, &n}, func() error { out[item] = n; return nil })
			return out, err
		},
		write: func(ctx context.Context, snap lease.Snapshot, partition string) (bool, error) {
			err := fencepostgres.Tx(ctx, admin, snap, []string{partition}, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO writes (partition, token) VALUES ($1, $2)`, partition, int64(snap.Token))
				return err
			})
			if errors.Is(err, fence.ErrStale) {
				return false, nil
			}
			return err == nil, err
		},
		accepted: func(ctx context.Context, partition string) ([]lease.Token, error) {
			rows, err := admin.Query(ctx, `SELECT token FROM writes WHERE partition = $1 ORDER BY seq`, partition)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowTo[lease.Token])
		},
	}
	s.source = func(t testing.TB, queue string) source { return s.retaining(t, queue, 0, 0) }
	return s
}

// pgPool returns a pool of at most size connections to url, closed when t
// ends.
func pgPool(t testing.TB, url string, size int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = size
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// newPolicy returns the policy o describes.
func newPolicy(t testing.TB, o lease.PolicyOptions) lease.Policy {
	t.Helper()
	p, err := lease.NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// loadedPolicy returns a policy of ttl whose backend calls may take a
// quarter of it, as they may on a loaded test machine: renew every ttl/4,
// time out after ttl/4.
func loadedPolicy(t testing.TB, ttl time.Duration) lease.Policy {
	t.Helper()
	return newPolicy(t, lease.PolicyOptions{TTL: ttl, RenewEvery: ttl / 4, OperationTimeout: ttl / 4, Retry: ttl / 20})
}

// newClient returns a lease client for owner on b.
func newClient(t testing.TB, b lease.Backend, owner string, clock lease.Clock) *lease.Client {
	t.Helper()
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: owner, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newQueue returns a queue on src for a new worker of s named owner.
func newQueue(t testing.TB, s *store, src leasequeue.Source, owner string, o leasequeue.Options) *leasequeue.Queue {
	t.Helper()
	return newQueueOnClock(t, s, src, owner, nil, o)
}

// newQueueOnClock is newQueue for a worker whose lease client tells time
// with clock (nil: the system clock).
func newQueueOnClock(t testing.TB, s *store, src leasequeue.Source, owner string, clock lease.Clock, o leasequeue.Options) *leasequeue.Queue {
	t.Helper()
	q, err := leasequeue.New(newClient(t, s.backend(t), owner, clock), src, o)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// eventually polls cond every 20ms until it holds or limit passes, and
// fails the test then. limit is far above what cond needs on an idle
// machine: it only keeps a broken test from hanging.
func eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
