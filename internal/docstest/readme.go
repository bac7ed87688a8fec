package docstest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golib/lease/lease"
	"github.com/jackc/pgx/v5/pgxpool"
)

// nightlyBilling is the core shape shown in README.md.
func nightlyBilling(ctx context.Context, backend lease.Backend, db *pgxpool.Pool, hostname string) error {
	// docs:begin shape
	client, err := lease.NewClient(backend, lease.ClientOptions{Owner: "billing-worker/" + hostname})
	if err != nil {
		return err
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	if err != nil {
		return err
	}

	h, err := client.Acquire(ctx, "billing/nightly", policy)
	if errors.Is(err, lease.ErrNotAcquired) {
		return nil // another replica is on it
	} else if err != nil {
		return err
	}
	m := h.StartManaged(ctx)                    // renew in the background
	defer m.Stop(ctx)                           // runs second: stop renewing
	defer h.Release(context.WithoutCancel(ctx)) // runs first: free the key at once

	// Work under m.Context(): it is cancelled the moment the lease is lost.
	// Every protected write carries the token, and the database refuses a
	// token lower than the last one it accepted for that row.
	tag, err := db.Exec(m.Context(),
		`UPDATE billing_runs SET status = 'done', fence = $1 WHERE month = $2 AND fence <= $1`,
		h.Token(), "2026-11")
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("token %d is stale: a newer holder took over", h.Token())
	}
	// docs:end shape
	return nil
}

var _ = nightlyBilling
