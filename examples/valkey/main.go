// Command valkey is the Valkey quickstart (docs/valkey-quickstart.md) as a
// program: it connects to a Valkey server, checks its settings, acquires a
// lease, makes a fenced write with the lease's token, and shuts down
// cleanly.
//
//	go run ./examples/valkey -addr 127.0.0.1:6379
//
// The address can also come from VALKEY_ADDR. With -user and -password it
// logs in as an ACL user; with -tls it connects over TLS (-ca names the
// server's CA certificate).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.addr, "addr", envOr("VALKEY_ADDR", "127.0.0.1:6379"), "Valkey address (host:port); default $VALKEY_ADDR")
	flag.StringVar(&cfg.user, "user", "", "ACL user name")
	flag.StringVar(&cfg.password, "password", os.Getenv("VALKEY_PASSWORD"), "ACL password; default $VALKEY_PASSWORD")
	flag.BoolVar(&cfg.tls, "tls", false, "connect over TLS")
	flag.StringVar(&cfg.caFile, "ca", "", "PEM file of the CA that signed the server's certificate (with -tls)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "valkey example:", err)
		os.Exit(1)
	}
}

type config struct {
	addr, user, password string
	tls                  bool
	caFile               string
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	opt, err := clientOption(cfg)
	if err != nil {
		return err
	}
	// docs:begin connect
	client, err := valkey.NewClient(opt)
	if err != nil {
		return err
	}
	defer client.Close() // last: the lease store never closes the client

	store, err := leasevalkey.New(client, leasevalkey.Options{Prefix: "lease:"})
	if err != nil {
		return err
	}
	// Refuse to start on a server that could evict leases or is too old.
	if err := store.Check(ctx); err != nil {
		return err
	}
	// docs:end connect

	// docs:begin acquire
	hostname, _ := os.Hostname()
	leases, err := lease.NewClient(store, lease.ClientOptions{Owner: "report-writer/" + hostname})
	if err != nil {
		return err
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{
		TTL:  10 * time.Second,
		Wait: 30 * time.Second, // keep trying while another replica holds it
	})
	if err != nil {
		return err
	}
	h, err := leases.Acquire(ctx, "reports/daily", policy)
	if errors.Is(err, lease.ErrNotAcquired) {
		fmt.Fprintln(out, "another replica is writing the report:", err)
		return nil
	} else if err != nil {
		return err
	}
	m, err := h.StartManaged(ctx) // renew every TTL/3 in the background
	if err != nil {
		return err
	}
	defer m.Stop(context.WithoutCancel(ctx))    // runs second: stop renewing
	defer h.Release(context.WithoutCancel(ctx)) // runs first: free the key at once
	fmt.Fprintf(out, "acquired %q with token %d\n", h.Key(), h.Token())
	// docs:end acquire

	// docs:begin write
	// Work under m.Context(): it is cancelled the moment the lease is lost.
	// The fence of the resource "reports/daily" refuses a token below the
	// highest one that wrote it, in the same script as the write; every key
	// the write touches carries the resource's hash tag.
	fences, err := fence.NewValkey(client, fence.ValkeyOptions{})
	if err != nil {
		return err
	}
	_, err = fences.Do(m.Context(), h.Snapshot(), "reports/daily",
		fence.Set("report:{reports/daily}", "report body", fence.SetOptions{}))
	if errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("a newer holder already wrote the report: %w", err)
	} else if err != nil {
		return err
	}
	fmt.Fprintln(out, "wrote the report under token", h.Token())
	// docs:end write

	// docs:begin shutdown
	// Release now rather than in the deferred call, to see the outcome.
	if err := h.Release(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("release: %w", err) // the lease ends by itself when its TTL passes
	}
	if err := m.Stop(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("the lease was lost while writing: %w", err)
	}
	fmt.Fprintln(out, "released; shutting down")
	return nil
	// docs:end shutdown
}
