package valkey_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// lostReason returns the reason of err, a *lease.LostError, failing t
// otherwise.
func lostReason(t *testing.T, what string, err error) lease.LostReason {
	t.Helper()
	var lost *lease.LostError
	if !errors.As(err, &lost) {
		t.Fatalf("%s = %v, want a *lease.LostError", what, err)
	}
	return lost.Reason
}

// inspect returns the record of key, failing t on an error.
func inspect(t *testing.T, s *leasevalkey.Store, key string) lease.Record {
	t.Helper()
	r, err := s.Inspect(ctxT(t), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	return r
}

func TestHandOff(t *testing.T) {
	t.Parallel()
	for _, topo := range []struct {
		name   string
		client func(testing.TB) valkey.Client
	}{{"standalone", standalone}, {"cluster", cluster}} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			c := topo.client(t)
			s := newStore(t, c)
			ctx := ctxT(t)
			const key = "job"
			a := acquire(t, s, key, "a", time.Minute)
			cands := []string{"c2", "c1"}
			t1, err := s.HandOff(ctx, a, lease.Offer{Candidates: cands, Window: time.Minute})
			if err != nil {
				t.Fatalf("HandOff: %v", err)
			}
			if t1 <= a.Token {
				t.Fatalf("HandOff gave token %d, not above the holder's %d", t1, a.Token)
			}
			// The record: an offer, kept for the window plus the retention.
			r := inspect(t, s, key)
			if r.Held || r.Owner != "a" || r.Token != t1 || !slices.Equal(r.Candidates, cands) || r.Ending != lease.EndHandedOff ||
				r.Remaining <= 0 || r.Remaining > time.Minute {
				t.Fatalf("Inspect during the offer = %+v; want free, owner a, token %d, candidates %q, handed off, the window left", r, t1, cands)
			}
			if ttl := pttl(t, c, s.RecordKey(key)); ttl <= int64(s.Retention()/time.Millisecond) {
				t.Errorf("PTTL of the handed-off record = %dms, want above the retention of %v", ttl, s.Retention())
			}
			// The old holder is told it handed the lease off; its cleanup
			// by nonce (token 0) changes nothing.
			if got := lostReason(t, "Renew by the old holder", s.Renew(ctx, a, time.Minute)); got != lease.HandedOff {
				t.Errorf("Renew by the old holder: reason %v, want HandedOff", got)
			}
			byNonce := a
			byNonce.Token = 0
			if got := lostReason(t, "Release by nonce", s.Release(ctx, byNonce)); got != lease.HandedOff {
				t.Errorf("Release by nonce of the old holder: reason %v, want HandedOff", got)
			}
			if _, err := s.HandOff(ctx, a, lease.Offer{Candidates: cands, Window: time.Minute}); lostReason(t, "a second HandOff", err) != lease.HandedOff {
				t.Errorf("a second HandOff: %v, want HandedOff", err)
			}
			if r2 := inspect(t, s, key); r2.Token != t1 || !slices.Equal(r2.Candidates, cands) {
				t.Fatalf("Inspect after the old holder's calls = %+v; want the offer unchanged", r2)
			}
			// Others are refused, with the offer.
			_, err = s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: "x", Nonce: rand.Text(), TTL: time.Minute})
			var na *lease.NotAcquiredError
			if !errors.As(err, &na) || na.Holder != "" || na.Token != t1 || !slices.Equal(na.Candidates, cands) || na.Remaining <= 0 {
				t.Fatalf("Acquire by a non-candidate = %v (%+v); want refused with the candidates and token %d", err, na, t1)
			}
			// A candidate takes it with the offered token, once.
			b := acquire(t, s, key, "c1", time.Minute)
			if b.Token != t1 {
				t.Fatalf("the candidate got token %d, want the offered %d", b.Token, t1)
			}
			if tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: "c1", Nonce: b.Nonce, TTL: time.Minute}); err != nil || tok != t1 {
				t.Fatalf("the candidate's retry = %d, %v; want %d", tok, err, t1)
			}
			if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: "c2", Nonce: rand.Text(), TTL: time.Minute}); err == nil {
				t.Fatal("the other candidate acquired the key the first one holds")
			}
			if r := inspect(t, s, key); !r.Held || r.Owner != "c1" || r.Candidates != nil || r.Ending != lease.EndUnknown || r.Transitions != 1 {
				t.Fatalf("Inspect after the candidate's grant = %+v; want held by c1, no offer, one transition", r)
			}
			if got := lostReason(t, "Renew by the old holder", s.Renew(ctx, a, time.Minute)); got != lease.Superseded {
				t.Errorf("Renew by the old holder after the grant: reason %v, want Superseded", got)
			}
			// A short offer lapses: then anyone gets a token above it.
			t2, err := s.HandOff(ctx, b, lease.Offer{Candidates: []string{"nobody"}, Window: 20 * time.Millisecond})
			if err != nil || t2 <= t1 {
				t.Fatalf("HandOff of the candidate = %d, %v; want a token above %d", t2, err, t1)
			}
			for r := inspect(t, s, key); r.Candidates != nil; r = inspect(t, s, key) {
				time.Sleep(10 * time.Millisecond)
			}
			if r := inspect(t, s, key); r.Held || r.Ending != lease.EndHandedOff || r.Token != t2 {
				t.Fatalf("Inspect after the offer lapsed = %+v; want free, handed off, token %d", r, t2)
			}
			if got := lostReason(t, "Renew after the lapse", s.Renew(ctx, b, time.Minute)); got != lease.HandedOff {
				t.Errorf("Renew by the handing holder after the lapse: reason %v, want HandedOff", got)
			}
			d := acquire(t, s, key, "x", time.Minute)
			if d.Token <= t2 {
				t.Fatalf("the grant after the lapse got token %d, not above the offered %d", d.Token, t2)
			}
			// A forced release ends a standing offer, keeping its token.
			t3, err := s.HandOff(ctx, d, lease.Offer{Candidates: cands, Window: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.ForceRelease(ctx, key, 0); err != nil {
				t.Fatal(err)
			}
			if r := inspect(t, s, key); r.Held || r.Candidates != nil || r.Ending != lease.EndForceReleased || r.Token != t3 {
				t.Fatalf("Inspect after a forced release of the offer = %+v; want free, force-released, token %d", r, t3)
			}
			if e := acquire(t, s, key, "x", time.Minute); e.Token <= t3 {
				t.Fatalf("the grant after the forced release got token %d, not above %d", e.Token, t3)
			}
		})
	}
}

func TestHandOffRefusesPermits(t *testing.T) {
	t.Parallel()
	s := newStore(t, standalone(t))
	a := acquire(t, s, lease.PermitKey("sem", 0), "a", time.Minute)
	_, err := s.HandOff(ctxT(t), a, lease.Offer{Candidates: []string{"b"}, Window: time.Minute})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("HandOff of a permit's key = %v, want errors.ErrUnsupported", err)
	}
}

// TestHandOffWakesWaitingCandidate: a candidate waiting in Client.Acquire,
// with a Retry far longer than the test, is granted at once, well before
// its Wait and the old holder's TTL.
func TestHandOffWakesWaitingCandidate(t *testing.T) {
	t.Parallel()
	s := newStore(t, standalone(t))
	holder, _ := lease.NewClient(s, lease.ClientOptions{Owner: "holder"})
	hold, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	h, err := holder.TryAcquire(ctxT(t), "handover", hold)
	if err != nil {
		t.Fatal(err)
	}
	lc, _ := lease.NewClient(s, lease.ClientOptions{Owner: "next"})
	wait, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Hour, Retry: 10 * time.Minute, Wait: 10 * time.Second, OperationTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		h2, err := lc.Acquire(ctxT(t), "handover", wait)
		if err == nil {
			err = h2.Release(context.Background())
		}
		got <- err
	}()
	awaitSubscribed(t, standalone(t), s)
	start := time.Now()
	if err := h.HandOff(ctxT(t), lease.Offer{Candidates: []string{"next"}}); err != nil {
		t.Fatalf("HandOff: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiting candidate's Acquire: %v", err)
	}
	t.Logf("candidate granted %v after the hand-off", time.Since(start).Round(time.Millisecond))
}

func TestPreferred(t *testing.T) {
	t.Parallel()
	s := newStore(t, standalone(t))
	ctx := ctxT(t)
	a := acquire(t, s, "k", "a", time.Minute)
	p := lease.AcquireRequest{Key: "k", Owner: "p", Nonce: rand.Text(), TTL: time.Minute, Preferred: true}
	var na *lease.NotAcquiredError
	if _, err := s.Acquire(ctx, p); !errors.As(err, &na) || na.Holder != "a" {
		t.Fatalf("a preferred Acquire of a held key = %v, want refused by a", err)
	}
	if r := inspect(t, s, "k"); !r.Held || r.Owner != "a" || r.Preferred != "p" {
		t.Fatalf("Inspect = %+v, want held by a with p preferred", r)
	}
	// Without Preferred nothing is recorded; the preference stands.
	if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "q", Nonce: rand.Text(), TTL: time.Minute}); err == nil {
		t.Fatal("q acquired a held key")
	}
	if r := inspect(t, s, "k"); r.Preferred != "p" {
		t.Fatalf("Inspect after q's plain Acquire = %+v, want p still preferred", r)
	}
	// Preferred never decides who gets the key.
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	q := acquire(t, s, "k", "q", time.Minute)
	if r := inspect(t, s, "k"); r.Owner != "q" || r.Preferred != "p" {
		t.Fatalf("Inspect after q's grant = %+v, want q holding, p still preferred", r)
	}
	if err := s.Release(ctx, q); err != nil {
		t.Fatal(err)
	}
	// A grant to the preferred owner clears it.
	acquire(t, s, "k", "p", time.Minute)
	if r := inspect(t, s, "k"); r.Owner != "p" || r.Preferred != "" {
		t.Fatalf("Inspect after p's grant = %+v, want p holding, none preferred", r)
	}
	// A preference lapses after the request's TTL.
	b := acquire(t, s, "k2", "b", time.Minute)
	_, _ = s.Acquire(ctx, lease.AcquireRequest{Key: "k2", Owner: "p", Nonce: rand.Text(), TTL: 20 * time.Millisecond, Preferred: true})
	for inspect(t, s, "k2").Preferred != "" {
		time.Sleep(10 * time.Millisecond)
	}
	if r := inspect(t, s, "k2"); !r.Held || r.Token != b.Token {
		t.Fatalf("Inspect after the preference lapsed = %+v, want b still holding", r)
	}
}

// woken fails t unless ch receives a value within the test's time.
func woken(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctxT(t).Done():
		t.Fatalf("not woken by %s", what)
	}
}

// notWoken fails t if ch holds a value. The caller made sure that the
// message in question was handled (another watch of the same
// subscription was woken by it).
func notWoken(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("woken by %s", what)
	default:
	}
}

// TestWatchChanges checks which announcements wake a change watcher and a
// release waiter of the same key, which share one subscription: both
// handle each message in the same call, so once the change watcher was
// woken by one, the release waiter's channel shows whether it was too.
func TestWatchChanges(t *testing.T) {
	t.Parallel()
	addr := testserver.Valkey(t).Addr()
	name := fmt.Sprintf("watch-changes-%d", time.Now().UnixNano())
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true, ClientName: name, PipelineMultiplex: singleConnection})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s := newStore(t, c)
	ctx := ctxT(t)
	const key = "w"
	changes, stopChanges, err := s.WatchChanges(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stopChanges()
	releases, stopReleases, err := s.WatchReleases(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stopReleases()
	woken(t, changes, "the subscription's confirmation")
	woken(t, releases, "the subscription's confirmation")

	a := acquire(t, s, key, "a", time.Minute)
	woken(t, changes, "a grant")
	notWoken(t, releases, "a grant")
	// A renewal and an Acquire retried with the holder's nonce are no
	// change (leasetest's ChangeWatcher subtests check it); a preferred
	// candidate is, for change watchers only.
	if err := s.Renew(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: "a", Nonce: a.Nonce, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: "p", Nonce: rand.Text(), TTL: time.Minute, Preferred: true}); err == nil {
		t.Fatal("the preferred candidate acquired a held key")
	}
	woken(t, changes, "a preferred candidate")
	notWoken(t, releases, "a preferred candidate")

	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	woken(t, changes, "a release")
	woken(t, releases, "a release")

	b := acquire(t, s, key, "b", time.Minute)
	woken(t, changes, "a grant")
	notWoken(t, releases, "a grant")
	if _, err := s.HandOff(ctx, b, lease.Offer{Candidates: []string{"c"}, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	woken(t, changes, "a hand-off")
	woken(t, releases, "a hand-off")
	if _, err := s.ForceRelease(ctx, key, 0); err != nil {
		t.Fatal(err)
	}
	woken(t, changes, "a forced release of the offer")
	woken(t, releases, "a forced release of the offer")

	// Cut the store's connections: both are woken once the subscription
	// is back, since a change may have gone unseen.
	killClient(t, newClient(t, addr), c, name)
	woken(t, changes, "the subscription's confirmation after a reconnection")
	woken(t, releases, "the subscription's confirmation after a reconnection")
	acquire(t, s, key, "d", time.Minute)
	woken(t, changes, "a grant after the reconnection")
}
