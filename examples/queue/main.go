// Command queue is the leasequeue walkthrough (docs/queues.md) as a
// program. On one PostgreSQL database it runs two workers over a jobs
// table while a third claims an item and freezes past its lease: the item
// is taken over, sent once, and the frozen worker's late completion is
// refused. Then it shares six partitions among three workers and lets one
// of them leave.
//
//	go run ./examples/queue -url postgres://user@localhost:5432/app
//
// The URL can also come from DATABASE_URL.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasequeue/partition"
	"github.com/golib/lease/leasetest"
)

func main() {
	cfg := config{emails: 20, ttl: 2 * time.Second}
	flag.StringVar(&cfg.url, "url", os.Getenv("DATABASE_URL"), "PostgreSQL URL; default $DATABASE_URL")
	flag.Parse()
	if cfg.url == "" {
		fmt.Fprintln(os.Stderr, "queue example: pass -url or set DATABASE_URL")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "queue example:", err)
		os.Exit(1)
	}
}

type config struct {
	url    string
	emails int           // how many items to send
	ttl    time.Duration // the leases' TTL
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	pool, err := pgxpool.New(ctx, cfg.url)
	if err != nil {
		return err
	}
	defer pool.Close() // last: nothing else closes the pool

	// docs:begin setup
	// Create or upgrade the tables; safe when replicas start together.
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		return err
	}
	if err := fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{}); err != nil {
		return err
	}
	if err := leasequeue.MigratePostgres(ctx, pool, leasequeue.PostgresOptions{}); err != nil {
		return err
	}
	store, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: cfg.ttl})
	if err != nil {
		return err
	}
	// docs:end setup
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS sent_emails (id text NOT NULL, token bigint NOT NULL)`); err != nil {
		return err
	}
	if err := sendEmails(ctx, cfg, pool, store, policy, out); err != nil {
		return err
	}
	return shareShards(ctx, pool, store, policy, out)
}

// sendEmails runs two workers over cfg.emails items, while a third one
// claims the first item and freezes.
func sendEmails(ctx context.Context, cfg config, pool *pgxpool.Pool, store *leasepostgres.Store, policy lease.Policy, out io.Writer) error {
	// docs:begin enqueue
	emails, err := leasequeue.NewPostgresSource(pool, "emails", leasequeue.PostgresOptions{})
	if err != nil {
		return err
	}
	var ids []string
	for i := range cfg.emails {
		ids = append(ids, fmt.Sprintf("email-%02d", i))
	}
	if _, err := emails.Enqueue(ctx, ids...); err != nil {
		return err
	}
	// docs:end enqueue
	fmt.Fprintf(out, "%d emails, TTL %v\n", len(ids), cfg.ttl)

	// worker-b claims email-00, and then its process freezes (a long GC
	// pause, a VM migration): it renews nothing and writes nothing until
	// it wakes up. A clock that stands still stands in for the frozen
	// process: its renewer waits for time that does not pass.
	clientB, err := lease.NewClient(store, lease.ClientOptions{Owner: "worker-b", Clock: leasetest.NewFakeClock(time.Now())})
	if err != nil {
		return err
	}
	qB, err := leasequeue.New(clientB, emails, leasequeue.Options{Name: "emails", Policy: policy})
	if err != nil {
		return err
	}
	frozen, err := qB.Claim(ctx, "email-00")
	if err != nil {
		return err
	}
	wakeUp := time.Now().Add(2 * cfg.ttl)
	fmt.Fprintf(out, "worker-b claims email-00 with token %d and freezes for %v\n", frozen.Snapshot().Token, 2*cfg.ttl)

	var sent atomic.Int64
	done := make(chan struct{})
	observer := leasequeue.ObserverFunc(func(e leasequeue.Event) {
		if c, ok := e.(*leasequeue.Completed); ok && c.Err == nil && sent.Add(1) == int64(len(ids)) {
			close(done)
		}
	})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for _, worker := range []string{"worker-a", "worker-c"} {
		client, err := lease.NewClient(store, lease.ClientOptions{Owner: worker})
		if err != nil {
			return err
		}
		// docs:begin worker
		q, err := leasequeue.New(client, emails, leasequeue.Options{
			Name: "emails", Policy: policy, Concurrency: 4, Observer: observer,
		})
		if err != nil {
			return err
		}
		wg.Go(func() {
			_ = q.Run(wctx, func(ctx context.Context, c *leasequeue.Claim) error {
				// ... send the email c.ID(), stopping if ctx ends ...
				// Done exactly when this row is written, under the claim's fence:
				return emails.CompleteTx(ctx, c, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO sent_emails (id, token) VALUES ($1, $2)`,
						c.ID(), int64(c.Snapshot().Token))
					return err
				})
			})
		})
		// docs:end worker
	}
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	stop()
	wg.Wait()
	it, err := emails.Item(ctx, "email-00")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "email-00 was taken over and sent by %s with token %d (attempt %d)\n", it.Owner, it.Token, it.Attempts)

	// docs:begin stale
	time.Sleep(time.Until(wakeUp))
	// worker-b wakes up, unaware, and completes its item: refused.
	err = frozen.Complete(ctx)
	if !errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("a stale completion was not refused: %v", err)
	}
	fmt.Fprintf(out, "worker-b wakes up; its completion is refused: %v\n", err)
	// docs:end stale

	var rows, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT id) FROM sent_emails`).Scan(&rows, &distinct); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d emails sent, %d rows written: each exactly once\n", distinct, rows)
	if rows != len(ids) || distinct != len(ids) {
		return fmt.Errorf("%d rows for %d emails", rows, len(ids))
	}
	return nil
}

// shareShards shares six partitions among three workers, then lets one
// leave.
func shareShards(ctx context.Context, pool *pgxpool.Pool, store *leasepostgres.Store, policy lease.Policy, out io.Writer) error {
	roster, err := partition.NewPostgresRoster(pool, leasequeue.PostgresOptions{})
	if err != nil {
		return err
	}
	shards := []string{"shard-0", "shard-1", "shard-2", "shard-3", "shard-4", "shard-5"}
	groups := map[string]*partition.Group{}
	stops := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	for _, worker := range []string{"worker-a", "worker-b", "worker-c"} {
		client, err := lease.NewClient(store, lease.ClientOptions{Owner: worker})
		if err != nil {
			return err
		}
		// docs:begin group
		g, err := partition.New(client, partition.Options{
			Name: "billing", Partitions: shards, Policy: policy, Roster: roster,
		})
		if err != nil {
			return err
		}
		gctx, stop := context.WithCancel(ctx)
		wg.Go(func() {
			_ = g.Run(gctx, func(ctx context.Context, p partition.Owned) error {
				for ctx.Err() == nil { // until the shard is revoked or lost
					err := fencepostgres.Tx(ctx, pool, p.Snapshot, []string{p.Name}, func(tx pgx.Tx) error {
						return nil // ... process the shard's next batch ...
					})
					if errors.Is(err, fence.ErrStale) {
						return err // another worker owns the shard now
					}
					select {
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
				return nil
			})
		})
		// docs:end group
		groups[worker], stops[worker] = g, stop
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
		wg.Wait()
	}()

	show := func(workers ...string) error {
		// Wait until the shares are even (a few rebalances).
		for {
			var owned int
			even := true
			for _, w := range workers {
				n := len(groups[w].Owned())
				owned += n
				even = even && n == len(shards)/len(workers)
			}
			if even && owned == len(shards) {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		for _, w := range workers {
			fmt.Fprintf(out, "  %s owns %v\n", w, groups[w].Owned())
		}
		return nil
	}
	fmt.Fprintf(out, "3 workers share %d shards:\n", len(shards))
	if err := show("worker-a", "worker-b", "worker-c"); err != nil {
		return err
	}
	stops["worker-c"]()
	fmt.Fprintln(out, "worker-c leaves; its shards move:")
	if err := show("worker-a", "worker-b"); err != nil {
		return err
	}
	owners := map[string]string{}
	for _, w := range []string{"worker-a", "worker-b"} {
		for _, p := range groups[w].Owned() {
			if o, dup := owners[p]; dup {
				return fmt.Errorf("%s owned by %s and %s", p, o, w)
			}
			owners[p] = w
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for p := range owners {
			if !yield(p) {
				return
			}
		}
	})
	fmt.Fprintf(out, "every shard has one owner: %v\n", keys)
	return nil
}
