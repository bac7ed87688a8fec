// Command metrics serves the Prometheus metrics of a small fleet of workers
// that share leases and a queue. It runs on the in-memory backend, so it
// needs no server:
//
//	go run ./examples/metrics -addr 127.0.0.1:2112
//	curl -s 127.0.0.1:2112/metrics | grep '^lease_'
//
// Three workers campaign for one singleton lease ("reports/nightly", whose
// key label is "reports": the part of the key before its first '/', as
// the singleton alert of docs/lease.rules.yml expects); the holder keeps
// it renewed and hands it over now and then. The same workers
// process a queue of items, one in five of which fails once and is retried,
// and prune done items once they are half a second old. Every event
// goes to one leaseprom.Metrics, registered once, whose lease_held,
// lease_acquisitions_total, lease_renewals_total,
// lease_queue_completions_total, lease_queue_pruned_items_total and the
// rest show what the fleet does.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseprom"
	"github.com/golib/lease/leasequeue"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:2112", "address to serve /metrics on")
	items := flag.Int("items", 50, "queue items to process")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
	fmt.Printf("serving http://%s/metrics; interrupt to stop\n", ln.Addr())
	if err := run(ctx, ln, *items); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// run serves /metrics on ln and runs the fleet until ctx ends.
func run(ctx context.Context, ln net.Listener, items int) error {
	// docs:begin wiring
	metrics := leaseprom.New(leaseprom.Options{
		// One label value per job: the part of the key before the first '/'.
		KeyLabel: func(key string) string { job, _, _ := strings.Cut(key, "/"); return job },
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	// docs:end wiring
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.WithoutCancel(ctx))
	}()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	backend := leasememory.New(leasememory.Options{})
	// Done items are kept half a second and pruned every quarter of one,
	// so that a scrape shows prunes; the defaults are a day and an hour.
	source := leasequeue.NewMemorySource(leasequeue.MemoryOptions{DoneRetention: 500 * time.Millisecond})
	ids := make([]string, items)
	for i := range ids {
		ids[i] = fmt.Sprint("item-", i)
	}
	source.Enqueue(ids...)
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 600 * time.Millisecond})
	if err != nil {
		return err
	}
	errc := make(chan error, 6)
	for i := range 3 {
		client, err := lease.NewClient(backend, lease.ClientOptions{Owner: fmt.Sprint("worker-", i), Observer: metrics.Lease()})
		if err != nil {
			return err
		}
		q, err := leasequeue.New(client, source, leasequeue.Options{
			Name: "queue", Policy: policy, PollEvery: 50 * time.Millisecond, PruneEvery: 250 * time.Millisecond,
			RetryDelay: func(int) time.Duration { return 100 * time.Millisecond },
			Observer:   metrics.Queue(),
		})
		if err != nil {
			return err
		}
		go func() { errc <- campaign(ctx, client, policy) }()
		go func() {
			errc <- q.Run(ctx, func(ctx context.Context, c *leasequeue.Claim) error {
				time.Sleep(20 * time.Millisecond)
				if c.Attempt() == 1 && strings.HasSuffix(c.ID(), "5") {
					return errors.New("transient failure")
				}
				return nil
			})
		}()
	}
	var first error
	for range 6 {
		if err := <-errc; err != nil && !errors.Is(err, context.Canceled) && first == nil {
			first = err
		}
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) && first == nil {
		first = err
	}
	return first
}

// campaign takes the singleton lease whenever it is free, keeps it renewed
// for a while, and hands it over.
func campaign(ctx context.Context, client *lease.Client, policy lease.Policy) error {
	for ctx.Err() == nil {
		h, err := client.Acquire(ctx, "reports/nightly", policy)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, lease.ErrNotAcquired):
			continue // another worker holds it: campaign again
		case err != nil:
			return err
		}
		m, err := h.StartManaged(ctx)
		if err != nil {
			return err
		}
		select {
		case <-time.After(time.Second): // the singleton's work
		case <-m.Lost():
		case <-ctx.Done():
		}
		_ = m.Stop(context.WithoutCancel(ctx))
		_ = h.Release(context.WithoutCancel(ctx))
	}
	return nil
}
