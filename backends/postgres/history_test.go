package postgres_test

import (
	"slices"
	"testing"
	"time"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/lease"
)

// TestHistoryUpgrade: a table migrated before the history columns existed,
// with a lease held in it, gets them from Migrate, in place: the held
// lease keeps working, shows no times until its key is granted again, and
// its holder changes count from then. The columns get no index, so that
// acquire and renew, which write them, stay HOT updates.
func TestHistoryUpgrade(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	// Back to migration 003, with a row an older version wrote.
	if _, err := pool.Exec(ctx, `ALTER TABLE public.leases DROP COLUMN acquired_at, DROP COLUMN renewed_at, DROP COLUMN transitions;
DELETE FROM public.leases_migrations WHERE version >= 4;
INSERT INTO public.leases (key, owner, nonce, token, expires_at) VALUES ('old', 'before', 'n', 7, now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check after the upgrade: %v", err)
	}
	r, err := s.Inspect(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if !r.Held || r.Token != 7 || !r.AcquiredAt.IsZero() || !r.RenewedAt.IsZero() || r.Transitions != 0 {
		t.Fatalf("Inspect of the old row = %+v; want it held, with no history", r)
	}
	old := lease.Acquisition{Key: "old", Owner: "before", Nonce: "n", Token: 7}
	if err := s.Renew(ctx, old, time.Hour); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Inspect(ctx, "old"); r.RenewedAt.IsZero() || !r.AcquiredAt.IsZero() {
		t.Fatalf("after Renew Inspect = %+v; want RenewedAt set, AcquiredAt still unknown", r)
	}
	if err := s.Release(ctx, old); err != nil {
		t.Fatal(err)
	}
	tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: "old", Owner: "after", Nonce: "m", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Inspect(ctx, "old"); r.Token != tok || r.AcquiredAt.IsZero() || !r.RenewedAt.Equal(r.AcquiredAt) || r.Transitions != 1 {
		t.Fatalf("after a new grant Inspect = %+v; want the grant's times and 1 transition", r)
	}

	// The primary key and the permits' partial index (migration 005) are
	// both on key, which no update changes; the predicate of the partial
	// index reads key alone too.
	rows, err := pool.Query(ctx, `SELECT DISTINCT a.attname::text
FROM pg_catalog.pg_index AS i
JOIN pg_catalog.pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
WHERE i.indrelid = 'public.leases'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	var indexed []string
	for rows.Next() {
		var col string
		if err := rows.Scan(&col); err != nil {
			t.Fatal(err)
		}
		indexed = append(indexed, col)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(indexed, []string{"key"}) {
		t.Fatalf("indexed columns of the lease table: %q; want the key alone (an index on a column acquire or renew writes ends their HOT updates)", indexed)
	}
}
