package fence_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/lease"
)

// TestValkeyLeasePostgresData: the lease lives in Valkey, the data in
// PostgreSQL; the paused holder's late write is refused all the same. It
// runs on the real servers' clocks: A's lease is short, and B retries
// until the server has expired it (nothing here asserts on time).
func TestValkeyLeasePostgresData(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := newPool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := leasevalkey.New(standalone(t), leasevalkey.Options{Prefix: "fence-test-" + time.Now().Format("150405.000000") + ":"})
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]*lease.Client{}
	for _, owner := range []string{"worker-a", "worker-b"} {
		if clients[owner], err = lease.NewClient(store, lease.ClientOptions{Owner: owner}); err != nil {
			t.Fatal(err)
		}
	}
	short, err := lease.NewPolicy(lease.PolicyOptions{TTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	patient, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second, Wait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	write := func(h *lease.Handle, body string) error {
		return fencepostgres.Tx(ctx, pool, h.Snapshot(), []string{"docs/1"}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO docs VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body`, body)
			return err
		})
	}

	a, err := clients["worker-a"].Acquire(ctx, "docs-writer", short)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(a, "by A"); err != nil {
		t.Fatal(err)
	}
	// A pauses (does nothing, renews nothing); B waits for the lease.
	b, err := clients["worker-b"].Acquire(ctx, "docs-writer", patient)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	if b.Token() <= a.Token() {
		t.Fatalf("B's token %d is not above A's %d", b.Token(), a.Token())
	}
	if err := write(b, "by B"); err != nil {
		t.Fatal(err)
	}
	if err := write(a, "late, by A"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("A's late write: %v; want ErrStale", err)
	}
	var body string
	if err := pool.QueryRow(ctx, `SELECT body FROM docs WHERE id = 1`).Scan(&body); err != nil || body != "by B" {
		t.Fatalf("body = %q, %v; want B's", body, err)
	}
	if err := a.Release(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("A's Release after expiry = %v; want ErrLost", err)
	}
}
