package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

// TestAdopt: a Handle adopted from a grant made by another request renews
// and releases that grant, keeps its token, and its local deadline counts
// from the grant's send time.
func TestAdopt(t *testing.T) {
	ctx := context.Background()
	clock := leasetest.NewFakeClock(time.Unix(1_000_000, 0))
	b := memory.New(memory.Options{Clock: clock})
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "worker", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sent := clock.Now()
	tok, err := b.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "worker", Nonce: "secret", TTL: p.TTL()})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	h, err := c.Adopt(lease.Acquisition{Key: "k", Owner: "worker", Nonce: "secret", Token: tok}, p, sent)
	if err != nil {
		t.Fatal(err)
	}
	if h.Token() != tok || h.Key() != "k" || !h.Deadline().Equal(sent.Add(p.LocalLifetime())) {
		t.Fatalf("adopted handle: token %d key %q deadline %v; want %d, k, %v", h.Token(), h.Key(), h.Deadline(), tok, sent.Add(p.LocalLifetime()))
	}
	if err := h.Renew(ctx); err != nil {
		t.Fatalf("Renew of the adopted handle = %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release of the adopted handle = %v", err)
	}
	if r, err := b.Inspect(ctx, "k"); err != nil || r.Held {
		t.Fatalf("after Release: %+v, %v; want the key free", r, err)
	}

	// A grant of another secret is not this handle's: the backend refuses.
	tok2, err := b.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "worker", Nonce: "other", TTL: p.TTL()})
	if err != nil {
		t.Fatal(err)
	}
	h2, err := c.Adopt(lease.Acquisition{Key: "k", Owner: "worker", Nonce: "guess", Token: tok2}, p, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.Renew(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Renew under a wrong secret = %v; want ErrLost", err)
	}
}

func TestAdoptRejects(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Unix(1_000_000, 0))
	c, err := lease.NewClient(memory.New(memory.Options{Clock: clock}), lease.ClientOptions{Owner: "worker", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ok := lease.Acquisition{Key: "k", Owner: "worker", Nonce: "n", Token: 1}
	for _, tc := range []struct {
		name string
		a    lease.Acquisition
		p    lease.Policy
		sent time.Time
		want error
	}{
		{"bad key", lease.Acquisition{Key: "", Owner: "worker", Nonce: "n", Token: 1}, p, clock.Now(), lease.ErrInvalidKey},
		{"other owner", lease.Acquisition{Key: "k", Owner: "someone", Nonce: "n", Token: 1}, p, clock.Now(), lease.ErrInvalidOwner},
		{"zero policy", ok, lease.Policy{}, clock.Now(), lease.ErrInvalidPolicy},
		{"no nonce", lease.Acquisition{Key: "k", Owner: "worker", Token: 1}, p, clock.Now(), nil},
		{"no token", lease.Acquisition{Key: "k", Owner: "worker", Nonce: "n"}, p, clock.Now(), nil},
		{"deadline passed", ok, p, clock.Now().Add(-p.LocalLifetime()), lease.ErrLost},
	} {
		h, err := c.Adopt(tc.a, tc.p, tc.sent)
		if h != nil || err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: Adopt = %v, %v; want no handle and an error matching %v", tc.name, h, err, tc.want)
		}
	}
}
