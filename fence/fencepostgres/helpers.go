package fencepostgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// Querier runs a query: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// maxLeadMicros is fence.MaxTokenLead in microseconds, as the statements
// count.
const maxLeadMicros = int64(fence.MaxTokenLead / time.Microsecond)

// invalid returns an error wrapping fence.ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{fence.ErrInvalid}, args...)...)
}

// checkRetention returns TableOptions.Retention r: the default for 0,
// KeepForever as is, an error for any other r ≤ 0.
func checkRetention(r time.Duration) (time.Duration, error) {
	switch {
	case r == 0:
		return lease.DefaultRetention, nil
	case r == lease.KeepForever:
		return r, nil
	case r < 0:
		return 0, invalid("TableOptions.Retention %v is negative (lease.KeepForever keeps fences for good)", r)
	}
	return r, nil
}

// sortedResources validates resources and returns them sorted (by bytes)
// and without duplicates, the order in which Tx locks their rows.
func sortedResources(resources []string) ([]string, error) {
	if len(resources) == 0 {
		return nil, invalid("no resource to fence")
	}
	for _, r := range resources {
		if err := fence.ValidateResource(r); err != nil {
			return nil, err
		}
	}
	out := slices.Clone(resources)
	slices.Sort(out)
	return slices.Compact(out), nil
}
