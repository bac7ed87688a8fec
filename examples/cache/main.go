// Command cache shows package cache on Valkey (docs/cache.md): two
// replicas of a service share one refresh of a slow report, and
// publications that a change to the source or a newer refresher made
// obsolete are refused.
//
//	go run ./examples/cache -addr 127.0.0.1:6379
//
// The address can also come from VALKEY_ADDR; for a cluster, give the
// primaries separated by commas.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/cache"
	"github.com/golib/lease/guard"
	"github.com/golib/lease/lease"
)

func main() {
	addr := flag.String("addr", envOr("VALKEY_ADDR", "127.0.0.1:6379"), "Valkey address (host:port), or a cluster's primaries separated by commas; default $VALKEY_ADDR")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, strings.Split(*addr, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "cache example:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// key names the cached report.
const key = "report/daily"

// database is the system of record: a slow query for the report's total.
type database struct {
	mu      sync.Mutex
	total   int
	queries atomic.Int64
}

func (db *database) queryTotal(ctx context.Context) (int, error) {
	db.queries.Add(1)
	select {
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.total, nil
}

func (db *database) setTotal(total int) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.total = total
}

// replica is one process of the service.
type replica struct {
	client  valkey.Client
	store   *leasevalkey.Store
	leases  *lease.Client
	reports *cache.Cache
	db      *database
}

func newReplica(name string, addrs []string, db *database) (*replica, error) {
	// docs:begin setup
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs})
	if err != nil {
		return nil, err
	}
	store, err := leasevalkey.New(client, leasevalkey.Options{})
	if err != nil {
		client.Close()
		return nil, err
	}
	// The lease client sweeps, with its records, the invalidation marks that
	// can no longer refuse anything; the Cache needs that client first, so
	// its Sweeper comes on its own.
	marks, err := cache.NewSweeper(client, store, cache.DefaultPrefix)
	if err != nil {
		client.Close()
		return nil, err
	}
	leases, err := lease.NewClient(store, lease.ClientOptions{Owner: "reports/" + name, Sweepers: []lease.Sweeper{marks}})
	if err != nil {
		client.Close()
		return nil, err
	}
	// Entries live next to their refresh leases: same client, same servers.
	reports, err := cache.New(client, leases, cache.Options{TTL: time.Minute})
	if err != nil {
		client.Close()
		return nil, err
	}
	// docs:end setup
	return &replica{client: client, store: store, leases: leases, reports: reports, db: db}, nil
}

// report returns the daily report, from the cache or, on a miss, from the
// database, through exactly one replica.
func (r *replica) report(ctx context.Context) (string, cache.Info, error) {
	// docs:begin get
	v, info, err := r.reports.Get(ctx, key, func(ctx context.Context, token lease.Token) ([]byte, error) {
		// Runs in one process at a time, holding the refresh lease.
		total, err := r.db.queryTotal(ctx)
		if err != nil {
			return nil, err
		}
		return fmt.Appendf(nil, "total=%d", total), nil
	})
	// docs:end get
	return string(v), info, err
}

// changeTotal commits a new total and invalidates the cached report.
func (r *replica) changeTotal(ctx context.Context, total int) error {
	// docs:begin invalidate
	r.db.setTotal(total) // commit the change to the source first,
	// then invalidate: no refresh that started before this can publish.
	if err := r.reports.Invalidate(ctx, key); err != nil {
		return err
	}
	// docs:end invalidate
	return nil
}

// refreshByHand refreshes the report without Get: acquire the refresh
// lease, read the source, and publish guarded by the lease. pause runs
// between reading and publishing.
func (r *replica) refreshByHand(ctx context.Context, policy lease.Policy, pause func()) error {
	// docs:begin publish
	h, err := r.leases.Acquire(ctx, r.reports.LeaseKey(key), policy)
	if err != nil {
		return err
	}
	defer h.Release(context.WithoutCancel(ctx))
	g, err := r.store.Guard(h.Snapshot())
	if err != nil {
		return err
	}
	total, err := r.db.queryTotal(ctx)
	if err != nil {
		return err
	}
	pause()
	// Written only if h is still the current refresh and no Invalidate ran
	// since h was acquired.
	err = r.reports.Publish(ctx, g, key, fmt.Appendf(nil, "total=%d", total), 0)
	// docs:end publish
	return err
}

func run(ctx context.Context, out io.Writer, addrs []string) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	db := &database{total: 100}
	a, err := newReplica("a", addrs, db)
	if err != nil {
		return err
	}
	defer a.client.Close()
	b, err := newReplica("b", addrs, db)
	if err != nil {
		return err
	}
	defer b.client.Close()
	// Start from an empty entry, whatever an earlier run left.
	if err := a.changeTotal(ctx, 100); err != nil {
		return err
	}

	// 1. A stampede: 50 requests on each replica, all missing at once.
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = map[cache.Outcome]int{}
		errs     []error
	)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := a
			if i%2 == 1 {
				r = b
			}
			v, info, err := r.report(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && v != "total=100" {
				err = fmt.Errorf("got %q", v)
			}
			errs = append(errs, err)
			outcomes[info.Outcome]++
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// A request that came late may find the report published already: a hit.
	say("100 requests on 2 replicas: %d database query; %d request loaded the report, the other %d got that load's result",
		db.queries.Load(), outcomes[cache.Loaded], outcomes[cache.Shared]+outcomes[cache.Hit])

	// 2. A hit.
	v, info, err := b.report(ctx)
	if err != nil {
		return err
	}
	say("replica b: %s (%v, published under token %d)", v, info.Outcome, info.Token)

	// 3. A refresh that read the old total loses to the invalidation.
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second, Wait: 5 * time.Second, Retry: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	err = b.refreshByHand(ctx, policy, func() {
		if err := a.changeTotal(ctx, 120); err != nil {
			say("invalidate: %v", err)
		}
		say("replica a committed total=120 and invalidated the report")
	})
	if !errors.Is(err, cache.ErrInvalidated) {
		return fmt.Errorf("the refresh that read total=100 was not refused: %v", err)
	}
	say("replica b's publication of total=100 was refused: %v", err)
	v, info, err = a.report(ctx)
	if err != nil {
		return err
	}
	say("replica a: %s (%v)", v, info.Outcome)

	// 4. A refresher paused past its lease loses to the one that took over.
	if err := a.changeTotal(ctx, 130); err != nil {
		return err
	}
	short, err := lease.NewPolicy(lease.PolicyOptions{TTL: 500 * time.Millisecond, OperationTimeout: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	err = a.refreshByHand(ctx, short, func() {
		// Replica a is paused here (a GC pause, a frozen VM) while replica b
		// waits for a's lease to expire on the server and refreshes.
		if err := b.refreshByHand(ctx, policy, func() {}); err != nil {
			say("replica b: %v", err)
			return
		}
		say("replica b took over the expired refresh lease and published total=130")
	})
	if !errors.Is(err, guard.ErrNotCurrent) {
		return fmt.Errorf("the paused refresh was not refused: %v", err)
	}
	say("replica a's late publication was refused: %v", err)
	v, info, err = a.report(ctx)
	if err != nil {
		return err
	}
	say("replica a: %s (%v)", v, info.Outcome)
	return nil
}
