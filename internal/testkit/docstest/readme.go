package docstest

import (
	"context"
	"errors"
	"time"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/lease"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// nightlyBilling is the core shape shown in README.md.
func nightlyBilling(ctx context.Context, pool *pgxpool.Pool, hostname string) error {
	// docs:begin shape
	store, err := leasepostgres.New(pool, leasepostgres.Options{}) // or leasevalkey.New(valkeyClient, ...)
	if err != nil {
		return err
	}
	client, err := lease.NewClient(store, lease.ClientOptions{Owner: "billing-worker/" + hostname})
	if err != nil {
		return err
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	if err != nil {
		return err
	}

	h, err := client.TryAcquire(ctx, "billing/nightly", policy) // one attempt; Acquire would wait
	if errors.Is(err, lease.ErrNotAcquired) {
		return nil // another replica is on it
	} else if err != nil {
		return err
	}
	defer h.Release(context.WithoutCancel(ctx)) // runs last: free the key at once
	m, err := h.StartManaged(ctx)               // renew in the background
	if err != nil {
		return err
	}
	defer m.Stop(context.WithoutCancel(ctx)) // runs first: stop renewing

	// Work under m.Context(): it is cancelled the moment the lease is lost.
	// Every protected write goes through a fence: it commits only if no
	// newer holder of "billing/nightly" has written to the resource since.
	err = fencepostgres.Tx(m.Context(), pool, h.Snapshot(), []string{"invoices/2026-11"}, func(tx pgx.Tx) error {
		_, err := tx.Exec(m.Context(), `UPDATE invoices SET status = 'billed' WHERE month = $1`, "2026-11")
		return err
	})
	if errors.Is(err, fence.ErrStale) {
		return nil // a newer holder took over; our write was refused, theirs stands
	}
	return err
	// docs:end shape
}

var _ = nightlyBilling
