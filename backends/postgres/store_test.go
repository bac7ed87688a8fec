package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/lease"
)

func newClient(t testing.TB, b lease.Backend, owner string) *lease.Client {
	t.Helper()
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: owner})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return c
}

func policy(t testing.TB, o lease.PolicyOptions) lease.Policy {
	t.Helper()
	if o.TTL == 0 {
		o.TTL = time.Minute
	}
	p, err := lease.NewPolicy(o)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

// TestOddKeysAndOwners: keys and owners are data, whatever they contain.
func TestOddKeysAndOwners(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	p := policy(t, lease.PolicyOptions{})
	for _, key := range []string{
		`it's "quoted"`,
		`'); DELETE FROM public.leases; --`,
		`$1 $2 %s %v \x00 \\`,
		"Ünïcødé ключ 鍵 🔑",
		"\u200b zero width \ufeff bom",
		strings.Repeat("k", lease.MaxKeyLen),
		strings.Repeat("鍵", lease.MaxKeyLen/3),
	} {
		owner := "owner " + key
		if len(owner) > lease.MaxOwnerLen {
			owner = owner[:lease.MaxOwnerLen-8] // cut on an ASCII byte
			owner = strings.ToValidUTF8(owner, "")
		}
		c := newClient(t, s, owner)
		h, err := c.TryAcquire(ctx, key, p)
		if err != nil {
			t.Fatalf("TryAcquire(%.40q): %v", key, err)
		}
		r, err := c.Inspect(ctx, key)
		if err != nil || !r.Held || r.Owner != owner || r.Token != h.Token() || r.Key != key {
			t.Fatalf("Inspect(%.40q) = %+v, %v", key, r, err)
		}
		if err := h.Renew(ctx); err != nil {
			t.Fatalf("Renew(%.40q): %v", key, err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatalf("Release(%.40q): %v", key, err)
		}
	}
	// The injection attempt above deleted nothing.
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM public.leases").Scan(&n); err != nil || n != 7 {
		t.Fatalf("%d rows, %v; want 7", n, err)
	}
}

// TestTokensAreTimeSeeded: tokens are microseconds on the database clock,
// below 2^53, and stay above the last one after the table lost its rows.
func TestTokensAreTimeSeeded(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	before := time.Now()
	t1, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if t1 >= 1<<53 {
		t.Fatalf("token %d is not below 2^53", t1)
	}
	// The database runs on this machine's clock: the token is a recent
	// time in microseconds.
	if got := time.UnixMicro(int64(t1)); got.Before(before.Add(-time.Hour)) || got.After(before.Add(time.Hour)) {
		t.Fatalf("token %d (%v) is not seeded from the clock", t1, got)
	}
	if err := s.Release(ctx, lease.Acquisition{Key: "k", Nonce: "n1", Token: t1}); err != nil {
		t.Fatal(err)
	}
	t2, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n2", TTL: time.Minute})
	if err != nil || t2 <= t1 {
		t.Fatalf("after release: token %d, %v; want above %d", t2, err, t1)
	}
	if _, err := pool.Exec(ctx, "TRUNCATE public.leases"); err != nil {
		t.Fatal(err)
	}
	t3, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n3", TTL: time.Minute})
	if err != nil || t3 <= t2 {
		t.Fatalf("after losing the table: token %d, %v; want above %d", t3, err, t2)
	}
}

// TestReleaseKeepsTheRow: a released key keeps its row and its token.
func TestReleaseKeepsTheRow(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, lease.Acquisition{Key: "k", Nonce: "n"}); err != nil { // token 0: by nonce
		t.Fatal(err)
	}
	var stored int64
	if err := pool.QueryRow(ctx, "SELECT token FROM public.leases WHERE key = 'k'").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if lease.Token(stored) != tok {
		t.Fatalf("stored token %d, want %d", stored, tok)
	}
	r, err := s.Inspect(ctx, "k")
	if err != nil || r.Held || r.Token != tok || r.Owner != "" {
		t.Fatalf("Inspect = %+v, %v; want free with token %d", r, err, tok)
	}
}

// TestRefusedRenewAndReleaseLeaveTheRow: a renew or release that is
// refused (another acquisition's nonce, a wrong token, an expired
// acquisition) writes the row back exactly as it was, its expiry and watch
// included, and a refused release sends no notification although a
// waiter marked the key.
func TestRefusedRenewAndReleaseLeaveTheRow(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	conn := listen(t, s, pool)
	acquire := func(key, nonce string) lease.Acquisition {
		tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: "o", Nonce: nonce, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		watch(t, s, key)
		return lease.Acquisition{Key: key, Owner: "o", Nonce: nonce, Token: tok}
	}
	a, b := acquire("a", "na"), acquire("b", "nb")
	leasepostgres.WaitMarked(s)
	row := func() string {
		var r string
		if err := pool.QueryRow(ctx, "SELECT l::text FROM public.leases AS l WHERE l.key = 'a'").Scan(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	refuse := func(what string, x lease.Acquisition, want lease.LostReason) {
		t.Helper()
		for op, call := range map[string]func() error{
			"Renew":   func() error { return s.Renew(ctx, x, time.Hour) },
			"Release": func() error { return s.Release(ctx, x) },
		} {
			before := row()
			err := call()
			if le, ok := errors.AsType[*lease.LostError](err); !ok || le.Reason != want {
				t.Fatalf("%s (%s) = %v, want a *lease.LostError (%v)", op, what, err, want)
			}
			if after := row(); after != before {
				t.Fatalf("%s (%s) changed the row:\n%s\nto\n%s", op, what, before, after)
			}
		}
	}
	other := a
	other.Nonce = "nx"
	refuse("another nonce", other, lease.Superseded)
	wrong := a
	wrong.Token++
	refuse("a wrong token", wrong, lease.Superseded)
	if _, err := pool.Exec(ctx, "UPDATE public.leases SET expires_at = statement_timestamp() - interval '1 second' WHERE key = 'a'"); err != nil {
		t.Fatal(err)
	}
	refuse("expired", a, lease.Expired)
	if err := s.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	if got := firstNotification(t, conn); got != "b" {
		t.Fatalf("first notification for %q, want %q (a refused release notified)", got, "b")
	}
}
