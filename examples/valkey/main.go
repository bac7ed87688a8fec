// Command valkey is the Valkey quickstart (docs/valkey-quickstart.md) as a
// program: it connects to a Valkey server, checks its settings, acquires a
// lease, makes a fenced write with the lease's token, and shuts down
// cleanly.
//
//	VALKEY_ADDR=127.0.0.1:6379 go run .
//
// With VALKEY_USER and VALKEY_PASSWORD set it logs in as that ACL user.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/lease"
)

func main() {
	addr := os.Getenv("VALKEY_ADDR") // host:port, such as 127.0.0.1:6379
	if addr == "" {
		fmt.Fprintln(os.Stderr, "quickstart: set VALKEY_ADDR")
		os.Exit(2)
	}
	opt := valkey.ClientOption{
		InitAddress: []string{addr},
		// An ACL user, if set (see "ACL users").
		Username: os.Getenv("VALKEY_USER"),
		Password: os.Getenv("VALKEY_PASSWORD"),
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, opt, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run connects to Valkey with opt, checks the server, and writes the
// daily report under a lease.
func run(ctx context.Context, opt valkey.ClientOption, out io.Writer) error {
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
	return dailyReport(ctx, client, store, out)
}

// dailyReport writes the daily report under the lease "reports/daily", so
// that one replica at a time does it.
func dailyReport(ctx context.Context, client valkey.Client, store *leasevalkey.Store, out io.Writer) error {
	hostname, _ := os.Hostname()
	leases, err := lease.NewClient(store, lease.ClientOptions{Owner: "report-writer/" + hostname})
	if err != nil {
		return err
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{
		TTL:  10 * time.Second,
		Wait: 30 * time.Second, // wait at most this long while another replica holds it
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
	defer h.Release(context.WithoutCancel(ctx)) // runs last: free the key at once
	m, err := h.StartManaged(ctx)               // renew every TTL/3 in the background
	if err != nil {
		return err // the lease was already lost, or ctx ended
	}
	defer m.Stop(context.WithoutCancel(ctx)) // runs first: stop renewing
	fmt.Fprintf(out, "acquired %q with token %d\n", h.Key(), h.Token())

	// Work under m.Context(): it is cancelled the moment the lease is lost.
	if err := writeReport(m.Context(), client, h.Snapshot(), "report body"); err != nil {
		return err
	}
	fmt.Fprintln(out, "wrote the report under token", h.Token())
	return shutdown(ctx, h, m, out)
}

// writeReport sets the report's key under the fence of the resource
// "reports/daily": one script refuses a token below the highest one that
// wrote the resource and otherwise applies the write. Every key the write
// touches carries the resource's hash tag.
func writeReport(ctx context.Context, client valkey.Client, snap lease.Snapshot, body string) error {
	fences, err := fencevalkey.New(client, fencevalkey.Options{})
	if err != nil {
		return err
	}
	_, err = fences.Do(ctx, snap, "reports/daily",
		fencevalkey.Set("report:{reports/daily}", body, fencevalkey.SetOptions{}))
	if errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("a newer holder already wrote the report: %w", err)
	}
	return err
}

// shutdown stops renewing the lease, which says whether it held while the
// work ran, then releases it, so that the next replica can start at once.
func shutdown(ctx context.Context, h *lease.Handle, m *lease.Managed, out io.Writer) error {
	if err := m.Stop(context.WithoutCancel(ctx)); err != nil {
		// The deferred Release still frees the key if the backend holds it.
		return fmt.Errorf("the lease was lost while writing: %w", err)
	}
	// Release now rather than in the deferred call, to see the outcome.
	if err := h.Release(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("release: %w", err) // the lease ends by itself when its TTL passes
	}
	fmt.Fprintln(out, "released; shutting down")
	return nil
}
