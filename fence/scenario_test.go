package fence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	sq "github.com/Masterminds/squirrel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencecolumn"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

// fenced is one resource behind one of the package's wrappers, holding one
// string value.
type fenced interface {
	// write stores value under snap's fence.
	write(ctx context.Context, snap lease.Snapshot, value string) error
	// claim advances the fence to snap, writing nothing else.
	claim(ctx context.Context, snap lease.Snapshot) error
	// read returns the stored value ("" if none).
	read(ctx context.Context) string
}

// wrappers returns a fresh resource behind each wrapper, by name.
func wrappers() map[string]func(t *testing.T) fenced {
	return map[string]func(t *testing.T) fenced{
		"Memory":           func(t *testing.T) fenced { return &memoryResource{} },
		"Tx":               newTxResource,
		"ColumnUpdate":     func(t *testing.T) fenced { return newColumnResource(t, false) },
		"ColumnUpsert":     func(t *testing.T) fenced { return newColumnResource(t, true) },
		"ValkeyStandalone": func(t *testing.T) fenced { return newValkeyResource(t, standalone(t)) },
		"ValkeyCluster":    func(t *testing.T) fenced { return newValkeyResource(t, cluster(t)) },
	}
}

// memoryResource is fence.Memory guarding a string.
type memoryResource struct {
	m     fence.Memory
	value string
}

func (r *memoryResource) write(_ context.Context, snap lease.Snapshot, value string) error {
	return r.m.Do(snap, []string{"doc"}, func() error { r.value = value; return nil })
}
func (r *memoryResource) claim(_ context.Context, snap lease.Snapshot) error {
	return r.m.Do(snap, []string{"doc"}, nil)
}
func (r *memoryResource) read(context.Context) string {
	var v string
	_ = r.m.Do(lease.Snapshot{Key: "reader", Token: 1}, []string{"read"}, func() error { v = r.value; return nil })
	return v
}

// txResource is a row of a table of its own, written in fencepostgres.Tx.
type txResource struct{ pool *pgxpool.Pool }

func newTxResource(t *testing.T) fenced {
	pool := newPool(t)
	if _, err := pool.Exec(ctxT(t), `CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &txResource{pool}
}

func (r *txResource) write(ctx context.Context, snap lease.Snapshot, value string) error {
	// docs:begin tx
	err := fencepostgres.Tx(ctx, r.pool, snap, []string{"docs/1"}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx,
			`INSERT INTO docs (id, body) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body`,
			value)
		return err
	})
	// docs:end tx
	return err
}
func (r *txResource) claim(ctx context.Context, snap lease.Snapshot) error {
	return fencepostgres.Claim(ctx, r.pool, snap, "docs/1")
}
func (r *txResource) read(ctx context.Context) string {
	var v string
	_ = r.pool.QueryRow(ctx, `SELECT body FROM docs WHERE id = 1`).Scan(&v)
	return v
}

// columnResource is a row fenced by its own columns, written with
// fencecolumn.Update (the row exists from the start) or fencecolumn.Upsert.
type columnResource struct {
	pool   *pgxpool.Pool
	upsert bool
}

var docColumn = fencecolumn.Column{Token: "fence_token", Key: "fence_key"}

func newColumnResource(t *testing.T, upsert bool) fenced {
	pool := newPool(t)
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL, fence_key text, fence_token bigint)`); err != nil {
		t.Fatal(err)
	}
	if !upsert {
		if _, err := pool.Exec(ctx, `INSERT INTO docs (id, body) VALUES (1, '')`); err != nil {
			t.Fatal(err)
		}
	}
	return &columnResource{pool, upsert}
}

func (r *columnResource) write(ctx context.Context, snap lease.Snapshot, value string) error {
	var err error
	if r.upsert {
		_, err = fencecolumn.Upsert(ctx, r.pool, snap,
			fencecolumn.UpsertRow{Table: "docs", Values: map[string]any{"id": 1, "body": value}, Conflict: []string{"id"}}, docColumn)
	} else {
		_, err = fencecolumn.Update(ctx, r.pool, snap,
			fencecolumn.UpdateRows{Table: "docs", Set: map[string]any{"body": value}, Where: sq.Eq{"id": 1}}, docColumn)
	}
	return err
}
func (r *columnResource) claim(ctx context.Context, snap lease.Snapshot) error {
	// A column fence is claimed by an update that changes nothing else.
	_, err := fencecolumn.Update(ctx, r.pool, snap,
		fencecolumn.UpdateRows{Table: "docs", Set: map[string]any{"body": sq.Expr("body")}, Where: sq.Eq{"id": 1}}, docColumn)
	return err
}
func (r *columnResource) read(ctx context.Context) string {
	var v string
	_ = r.pool.QueryRow(ctx, `SELECT body FROM docs WHERE id = 1`).Scan(&v)
	return v
}

// valkeyResource is a string key in Valkey.
type valkeyResource struct {
	c        valkey.Client
	v        *fencevalkey.Fence
	resource string
}

func newValkeyResource(t *testing.T, c valkey.Client) fenced {
	return &valkeyResource{c: c, v: newFence(t, c), resource: fmt.Sprintf("docs/%d", prefixes.Add(1))}
}

func (r *valkeyResource) key() string { return "doc:{" + r.resource + "}" }

func (r *valkeyResource) write(ctx context.Context, snap lease.Snapshot, value string) error {
	_, err := r.v.Do(ctx, snap, r.resource, fencevalkey.Set(r.key(), value, fencevalkey.SetOptions{}))
	return err
}
func (r *valkeyResource) claim(ctx context.Context, snap lease.Snapshot) error {
	return r.v.Claim(ctx, snap, r.resource)
}
func (r *valkeyResource) read(ctx context.Context) string {
	c := r.c
	v, _ := c.Do(ctx, c.B().Get().Key(r.key()).Build()).ToString()
	return v
}

// two holders of one lease on the memory backend and a fake clock.
type holders struct {
	clock  *leasetest.FakeClock
	a, b   *lease.Client
	policy lease.Policy
}

const ttl = 10 * time.Second

func newHolders(t *testing.T) *holders {
	t.Helper()
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC))
	backend := leasememory.New(leasememory.Options{Clock: clock})
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	h := &holders{clock: clock, policy: policy}
	for _, c := range []**lease.Client{&h.a, &h.b} {
		owner := "worker-a"
		if c == &h.b {
			owner = "worker-b"
		}
		if *c, err = lease.NewClient(backend, lease.ClientOptions{Owner: owner, Clock: clock}); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (h *holders) acquire(t *testing.T, c *lease.Client) *lease.Handle {
	t.Helper()
	handle, err := c.TryAcquire(t.Context(), "billing/nightly", h.policy)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	return handle
}

func mustWrite(t *testing.T, r fenced, snap lease.Snapshot, value string) {
	t.Helper()
	if err := r.write(t.Context(), snap, value); err != nil {
		t.Fatalf("write %q with token %d: %v", value, snap.Token, err)
	}
}

func wantStale(t *testing.T, err error, token, current lease.Token) {
	t.Helper()
	var se *fence.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("err = %v; want a *fence.StaleError", err)
	}
	if se.Token != token || se.Current != current {
		t.Fatalf("StaleError{Token: %d, Current: %d}; want %d, %d", se.Token, se.Current, token, current)
	}
	if fence.IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = true", err)
	}
}

func wantValue(t *testing.T, r fenced, want string) {
	t.Helper()
	if got := r.read(t.Context()); got != want {
		t.Fatalf("value = %q; want %q", got, want)
	}
}

// TestPausedStaleWriter: A acquires token N and writes; A pauses past its
// TTL; B acquires N+1 and writes; A wakes up and writes: refused, the data
// is B's; A's release reports the loss.
func TestPausedStaleWriter(t *testing.T) {
	for name, newResource := range wrappers() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, h := newResource(t), newHolders(t)
			a := h.acquire(t, h.a)
			mustWrite(t, r, a.Snapshot(), "by A")

			h.clock.Advance(ttl + time.Second) // A is paused past its TTL
			b := h.acquire(t, h.b)
			if b.Token() <= a.Token() {
				t.Fatalf("B's token %d is not above A's %d", b.Token(), a.Token())
			}
			mustWrite(t, r, b.Snapshot(), "by B")

			wantStale(t, r.write(t.Context(), a.Snapshot(), "late, by A"), a.Token(), b.Token())
			wantValue(t, r, "by B")
			mustWrite(t, r, b.Snapshot(), "by B again") // same token: accepted

			if err := a.Release(t.Context()); !errors.Is(err, lease.ErrLost) {
				t.Fatalf("A's Release after expiry = %v; want ErrLost", err)
			}
			wantValue(t, r, "by B again")
		})
	}
}

// TestLateWriteBeforeNewHoldersFirstWrite: B's acquisition alone does not
// fence; A's late write that reaches the store before B's first write is
// accepted, and refused from B's first write on. A claim right after
// acquiring closes the gap.
func TestLateWriteBeforeNewHoldersFirstWrite(t *testing.T) {
	for name, newResource := range wrappers() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, h := newResource(t), newHolders(t)
			a := h.acquire(t, h.a)
			mustWrite(t, r, a.Snapshot(), "by A")
			h.clock.Advance(ttl + time.Second)
			b := h.acquire(t, h.b)

			mustWrite(t, r, a.Snapshot(), "late, by A") // accepted: B has not written
			wantValue(t, r, "late, by A")
			mustWrite(t, r, b.Snapshot(), "by B")
			wantStale(t, r.write(t.Context(), a.Snapshot(), "later, by A"), a.Token(), b.Token())
			wantValue(t, r, "by B")
		})
		t.Run(name+"/Claim", func(t *testing.T) {
			t.Parallel()
			r, h := newResource(t), newHolders(t)
			a := h.acquire(t, h.a)
			mustWrite(t, r, a.Snapshot(), "by A")
			h.clock.Advance(ttl + time.Second)
			b := h.acquire(t, h.b)
			if err := r.claim(t.Context(), b.Snapshot()); err != nil {
				t.Fatalf("claim: %v", err)
			}

			wantStale(t, r.write(t.Context(), a.Snapshot(), "late, by A"), a.Token(), b.Token())
			wantValue(t, r, "by A")
			mustWrite(t, r, b.Snapshot(), "by B")
			wantValue(t, r, "by B")
		})
	}
}

// TestForeignLease: a token of another lease key is refused whatever its
// number, and does not move the fence.
func TestForeignLease(t *testing.T) {
	for name, newResource := range wrappers() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newResource(t)
			mustWrite(t, r, snap("docs-writer", 7), "by docs-writer")
			err := r.write(t.Context(), snap("reports-writer", 1_000_000), "by reports-writer")
			var fe *fence.ForeignLeaseError
			if !errors.As(err, &fe) || !errors.Is(err, fence.ErrForeignLease) || errors.Is(err, fence.ErrStale) {
				t.Fatalf("err = %v; want a *fence.ForeignLeaseError", err)
			}
			if fe.FencedBy != "docs-writer" || fe.Current != 7 || fe.Key != "reports-writer" || fe.Token != 1_000_000 {
				t.Fatalf("ForeignLeaseError = %+v", fe)
			}
			mustWrite(t, r, snap("docs-writer", 7), "again")
			wantValue(t, r, "again")
		})
	}
}

// TestTopTokens: the largest tokens each store accepts round-trip exactly.
// The stores with a clock accept tokens up to their clock in microseconds
// plus fence.MaxTokenLead (TestImplausibleTokens); Memory has no clock and
// takes any token.
func TestTopTokens(t *testing.T) {
	t.Parallel()
	// The test runs on the servers' machine: its clock is theirs.
	top := lease.Token(time.Now().Add(fence.MaxTokenLead - time.Minute).UnixMicro())
	for name, newResource := range wrappers() {
		tokens := []lease.Token{top - 1, top}
		if name == "Memory" {
			tokens = []lease.Token{1<<53 - 1, 1<<53 + 1, 1<<63 - 1, 1<<64 - 1}
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newResource(t)
			for _, tok := range tokens {
				mustWrite(t, r, snap("k", tok), "at "+tok.String())
				wantStale(t, r.write(t.Context(), snap("k", tok-1), "one below"), tok-1, tok)
			}
			wantValue(t, r, fmt.Sprint("at ", tokens[len(tokens)-1]))
		})
	}
}

// TestImplausibleTokens: a token more than fence.MaxTokenLead ahead of the
// store's clock — a forged or corrupted snapshot — is refused by every
// store with a clock, writes nothing and leaves the fence where it was, so
// the next holder's token is still admitted (issue 13: one forged snapshot
// with token 2^63−1 used to lock a PostgreSQL fence against every later
// holder).
func TestImplausibleTokens(t *testing.T) {
	t.Parallel()
	for name, newResource := range wrappers() {
		if name == "Memory" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newResource(t)
			now := lease.Token(time.Now().UnixMicro())
			mustWrite(t, r, snap("k", now), "current")
			ahead := lease.Token(time.Now().Add(fence.MaxTokenLead + time.Minute).UnixMicro())
			for _, tok := range []lease.Token{ahead, 1<<53 + 1, 1<<63 - 1} {
				for _, write := range []func(context.Context, lease.Snapshot) error{
					func(ctx context.Context, s lease.Snapshot) error { return r.write(ctx, s, "forged") },
					r.claim,
				} {
					err := write(t.Context(), snap("k", tok))
					var ie *fence.ImplausibleTokenError
					if !errors.As(err, &ie) || !errors.Is(err, fence.ErrImplausibleToken) || fence.IsRetryable(err) {
						t.Fatalf("write with token %d: %v; want an *ImplausibleTokenError", tok, err)
					}
					lo, hi := lease.Token(time.Now().Add(fence.MaxTokenLead-time.Minute).UnixMicro()), lease.Token(time.Now().Add(fence.MaxTokenLead+time.Minute).UnixMicro())
					if ie.Token != tok || ie.Key != "k" || ie.Largest < lo || ie.Largest > hi {
						t.Fatalf("ImplausibleTokenError = %+v; want Largest about %d", ie, lo+lease.Token(time.Minute/time.Microsecond))
					}
				}
			}
			wantValue(t, r, "current")
			// The fence did not move: the next holder writes.
			mustWrite(t, r, snap("k", now+1), "next")
			wantValue(t, r, "next")
		})
	}
}

// TestHandedOffWriter: A writes, hands its lease off to B, and B writes
// with the higher token the hand-off issued; A's late write is refused by
// every wrapper, and B's successor claim fences A out before B's first
// write too.
func TestHandedOffWriter(t *testing.T) {
	for name, newResource := range wrappers() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, h := newResource(t), newHolders(t)
			a := h.acquire(t, h.a)
			mustWrite(t, r, a.Snapshot(), "by A")
			if err := a.HandOff(t.Context(), lease.Offer{Candidates: []string{h.b.Owner()}}); err != nil {
				t.Fatalf("HandOff: %v", err)
			}
			b := h.acquire(t, h.b)
			if b.Token() <= a.Token() {
				t.Fatalf("B's token %d after the hand-off is not above A's %d", b.Token(), a.Token())
			}
			if err := r.claim(t.Context(), b.Snapshot()); err != nil {
				t.Fatalf("claim: %v", err)
			}
			wantStale(t, r.write(t.Context(), a.Snapshot(), "late, by A"), a.Token(), b.Token())
			mustWrite(t, r, b.Snapshot(), "by B")
			wantStale(t, r.write(t.Context(), a.Snapshot(), "later, by A"), a.Token(), b.Token())
			wantValue(t, r, "by B")
		})
	}
}
