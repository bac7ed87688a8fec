package fence_test

import (
	"errors"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
)

// TestDocExamples runs the code shown in the examples and docs/fencing.md
// against the real servers: the paused holder A is refused, B is not.
func TestDocExamples(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	_, err := pool.Exec(ctx, `
		CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL, total int NOT NULL DEFAULT 0, fence_key text, fence_token bigint);
		CREATE TABLE invoice_events (invoice int NOT NULL, event text NOT NULL);
		INSERT INTO invoices (id, status) VALUES (42, 'open');`)
	if err != nil {
		t.Fatal(err)
	}
	h := newHolders(t)
	a := h.acquire(t, h.a)
	if err := closeInvoice(ctx, pool, a, 42); err != nil {
		t.Fatalf("closeInvoice by A: %v", err)
	}
	if err := payInvoice(ctx, pool, a.Snapshot(), 42); err != nil {
		t.Fatalf("payInvoice by A: %v", err)
	}
	if err := payInvoice(ctx, pool, a.Snapshot(), 7); err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("payInvoice of a missing invoice: %v", err)
	}
	if err := recordTotal(ctx, pool, a.Snapshot(), 43, 100); err != nil {
		t.Fatalf("recordTotal by A: %v", err)
	}

	h.clock.Advance(ttl + time.Second)
	fences := newFence(t, standalone(t))
	b, err := takeOver(ctx, h.b, pool, fences, h.policy)
	if err != nil {
		t.Fatalf("takeOver by B: %v", err)
	}
	if err := closeInvoice(ctx, pool, a, 42); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("closeInvoice by A after B claimed: %v", err)
	}
	if err := closeInvoice(ctx, pool, b, 42); err != nil {
		t.Fatalf("closeInvoice by B: %v", err)
	}
	if err := payInvoice(ctx, pool, b.Snapshot(), 42); err != nil {
		t.Fatalf("payInvoice by B: %v", err)
	}
	if err := payInvoice(ctx, pool, a.Snapshot(), 42); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("payInvoice by A after B: %v", err)
	}
	if err := recordTotal(ctx, pool, b.Snapshot(), 43, 250); err != nil {
		t.Fatalf("recordTotal by B: %v", err)
	}
	if err := recordTotal(ctx, pool, a.Snapshot(), 43, 90); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("recordTotal by A after B: %v", err)
	}
	var events, total int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM invoice_events), (SELECT total FROM invoices WHERE id = 43)`).Scan(&events, &total); err != nil {
		t.Fatal(err)
	}
	if events != 2 || total != 250 {
		t.Fatalf("%d events, total %d; want 2 and 250", events, total)
	}

	for name, c := range map[string]valkey.Client{"standalone": standalone(t), "cluster": cluster(t)} {
		job := "jobs/" + name
		if err := finishJob(ctx, c, b, job); err != nil {
			t.Fatalf("finishJob by B on %s: %v", name, err)
		}
		if err := finishJob(ctx, c, a, job); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("finishJob by A on %s: %v", name, err)
		}
		state, _ := c.Do(ctx, c.B().Hget().Key("job:{"+job+"}").Field("by").Build()).ToString()
		if state != "worker-b" {
			t.Fatalf("job written by %q on %s; want worker-b", state, name)
		}
		// Leave no keys behind on the shared servers.
		for _, k := range []string{"job:", "jobs-done:", "events:", "fence:"} {
			_ = c.Do(ctx, c.B().Del().Key(k+"{"+job+"}").Build()).Error()
		}
	}
}
