package postgres_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/lease"
)

// acquireAs acquires key for owner with nonce, failing the test on an
// error.
func acquireAs(t *testing.T, s *leasepostgres.Store, key, owner, nonce string) lease.Acquisition {
	t.Helper()
	tok, err := s.Acquire(ctxT(t), lease.AcquireRequest{Key: key, Owner: owner, Nonce: nonce, TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire(%q) as %q: %v", key, owner, err)
	}
	return lease.Acquisition{Key: key, Owner: owner, Nonce: nonce, Token: tok}
}

// wantLost checks that err is a *lease.LostError with reason.
func wantLost(t *testing.T, what string, err error, reason lease.LostReason) {
	t.Helper()
	var lost *lease.LostError
	if !errors.As(err, &lost) || lost.Reason != reason {
		t.Fatalf("%s: %v, want a LostError with reason %v", what, err, reason)
	}
}

// inspect returns the record of key.
func inspect(t *testing.T, s *leasepostgres.Store, key string) lease.Record {
	t.Helper()
	rec, err := s.Inspect(ctxT(t), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	return rec
}

// lapse moves the expiry of key's row, a standing offer, into the past by
// d, as if its window had passed d ago.
func lapse(t *testing.T, pool *pgxpool.Pool, s *leasepostgres.Store, key string, d time.Duration) {
	t.Helper()
	if _, err := pool.Exec(ctxT(t), `UPDATE `+s.Table()+` SET expires_at = statement_timestamp() - $2::interval WHERE key = $1`,
		key, d); err != nil {
		t.Fatal(err)
	}
}

// TestHandOff: a hand-off issues a higher token, ends the old acquisition
// (HandedOff for its Renew and Release, also by nonce alone, which leaves
// the offer alone), refuses anyone but a candidate with the candidates, and
// grants a candidate the offered token, once.
func TestHandOff(t *testing.T) {
	t.Parallel()
	s, _ := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	a := acquireAs(t, s, "k", "a", "nonce-a")
	before := inspect(t, s, "k")
	tok, err := s.HandOff(ctx, a, lease.Offer{Candidates: []string{"b", "c"}, Window: time.Minute})
	if err != nil {
		t.Fatalf("HandOff: %v", err)
	}
	if tok <= a.Token {
		t.Fatalf("HandOff gave token %d, not above %d", tok, a.Token)
	}
	wantLost(t, "Renew after the hand-off", s.Renew(ctx, a, time.Minute), lease.HandedOff)
	wantLost(t, "Release after the hand-off", s.Release(ctx, a), lease.HandedOff)
	wantLost(t, "Release by nonce after the hand-off", s.Release(ctx, lease.Acquisition{Key: "k", Nonce: a.Nonce}), lease.HandedOff)
	wantLost(t, "a second HandOff", func() error {
		_, err := s.HandOff(ctx, a, lease.Offer{Candidates: []string{"d"}, Window: time.Minute})
		return err
	}(), lease.HandedOff)

	rec := inspect(t, s, "k")
	if rec.Held || rec.Owner != "a" || rec.Token != tok || rec.Ending != lease.EndHandedOff ||
		!slices.Equal(rec.Candidates, []string{"b", "c"}) || rec.Remaining <= 0 || rec.Remaining > time.Minute ||
		rec.Transitions != before.Transitions {
		t.Fatalf("Inspect during the offer: %+v", rec)
	}
	// The old holder's retried Acquire, and anyone else, are refused.
	for _, req := range []lease.AcquireRequest{
		{Key: "k", Owner: "a", Nonce: a.Nonce, TTL: time.Minute},
		{Key: "k", Owner: "x", Nonce: "nonce-x", TTL: time.Minute},
		{Key: "k", Owner: "x", Nonce: "nonce-x", TTL: time.Minute, Preferred: true},
	} {
		_, err := s.Acquire(ctx, req)
		var na *lease.NotAcquiredError
		if !errors.As(err, &na) || na.Holder != "" || na.Token != tok || !slices.Equal(na.Candidates, []string{"b", "c"}) || na.Remaining <= 0 {
			t.Fatalf("Acquire by %q during the offer: %v (%+v), want refused with the candidates", req.Owner, err, na)
		}
	}
	c := acquireAs(t, s, "k", "c", "nonce-c")
	if c.Token != tok {
		t.Fatalf("the candidate got token %d, want the offered %d", c.Token, tok)
	}
	if again := acquireAs(t, s, "k", "c", "nonce-c"); again.Token != tok {
		t.Fatalf("the candidate's retried Acquire got token %d, want %d", again.Token, tok)
	}
	if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "b", Nonce: "nonce-b", TTL: time.Minute}); err == nil {
		t.Fatal("the other candidate acquired the key the first one holds")
	}
	rec = inspect(t, s, "k")
	if !rec.Held || rec.Owner != "c" || rec.Token != tok || rec.Candidates != nil || rec.Ending != lease.EndUnknown ||
		rec.Transitions != before.Transitions+1 {
		t.Fatalf("Inspect after the candidate acquired: %+v", rec)
	}
	wantLost(t, "Renew after the candidate acquired", s.Renew(ctx, a, time.Minute), lease.Superseded)
	if err := s.Renew(ctx, c, time.Minute); err != nil {
		t.Fatalf("the candidate's Renew: %v", err)
	}
	if err := s.Release(ctx, c); err != nil {
		t.Fatalf("the candidate's Release: %v", err)
	}
	if rec := inspect(t, s, "k"); rec.Held || rec.Ending != lease.EndReleased {
		t.Fatalf("Inspect after the candidate released: %+v", rec)
	}
	// Not current: nothing changes.
	if _, err := s.HandOff(ctx, c, lease.Offer{Candidates: []string{"b"}, Window: time.Minute}); err == nil {
		t.Fatal("HandOff of a released acquisition succeeded")
	}
	if _, err := s.HandOff(ctx, lease.Acquisition{Key: "none", Nonce: "n", Token: 1}, lease.Offer{Candidates: []string{"b"}, Window: time.Minute}); err == nil {
		t.Fatal("HandOff of a key without a row succeeded")
	} else {
		wantLost(t, "HandOff of a key without a row", err, lease.RecordLost)
	}
}

// TestHandOffLapses: once the window passed, the key is free for anyone,
// with a token above the offered one; the old holder still learns it
// handed the key off; Inspect reports the hand-off as the ending, with no
// candidates; Sweep removes the row a retention after the window, and
// never a standing offer's.
func TestHandOffLapses(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{Retention: time.Hour})
	ctx := ctxT(t)
	for _, key := range []string{"lapsed", "swept", "standing"} {
		a := acquireAs(t, s, key, "a", "nonce-a")
		if _, err := s.HandOff(ctx, a, lease.Offer{Candidates: []string{"b"}, Window: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	lapse(t, pool, s, "lapsed", time.Second)
	lapse(t, pool, s, "swept", 2*time.Hour)
	rec := inspect(t, s, "lapsed")
	if rec.Held || rec.Candidates != nil || rec.Ending != lease.EndHandedOff || rec.Owner != "" {
		t.Fatalf("Inspect of a lapsed offer: %+v", rec)
	}
	wantLost(t, "Renew after the offer lapsed", s.Renew(ctx, lease.Acquisition{Key: "lapsed", Nonce: "nonce-a", Token: 1}, time.Minute), lease.HandedOff)

	page, err := s.Sweep(ctx, lease.SweepOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(page.Removed, []string{"swept"}) {
		t.Fatalf("Sweep removed %q, want only the offer that lapsed more than a retention ago", page.Removed)
	}
	x := acquireAs(t, s, "lapsed", "x", "nonce-x")
	if x.Token <= rec.Token {
		t.Fatalf("after the offer lapsed, token %d, not above the offered %d", x.Token, rec.Token)
	}
	if rec := inspect(t, s, "lapsed"); !rec.Held || rec.Owner != "x" || rec.Candidates != nil {
		t.Fatalf("Inspect after anyone acquired a lapsed offer: %+v", rec)
	}
	// The lapsed offer's candidates no longer let b take the key.
	if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: "lapsed", Owner: "b", Nonce: "nonce-b", TTL: time.Minute}); err == nil {
		t.Fatal("a candidate of a lapsed offer took the key from its new holder")
	}
	recs, _, err := s.List(ctx, "standing", "", 10)
	if err != nil || len(recs) != 1 || recs[0].Held || !slices.Equal(recs[0].Candidates, []string{"b"}) || recs[0].Ending != lease.EndHandedOff {
		t.Fatalf("List of a standing offer: %+v, %v", recs, err)
	}
}

// TestHandOffForceRelease: ForceRelease ends a standing offer, keeping its
// token; the key is then free for anyone, with a higher token.
func TestHandOffForceRelease(t *testing.T) {
	t.Parallel()
	s, _ := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	a := acquireAs(t, s, "k", "a", "nonce-a")
	tok, err := s.HandOff(ctx, a, lease.Offer{Candidates: []string{"b"}, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	prev, err := s.ForceRelease(ctx, "k", tok)
	if err != nil {
		t.Fatalf("ForceRelease of the offer: %v", err)
	}
	if prev.Held || !slices.Equal(prev.Candidates, []string{"b"}) || prev.Token != tok {
		t.Fatalf("ForceRelease returned %+v, want the offer", prev)
	}
	rec := inspect(t, s, "k")
	if rec.Held || rec.Candidates != nil || rec.Token != tok || rec.Ending != lease.EndForceReleased {
		t.Fatalf("Inspect after the forced release of the offer: %+v", rec)
	}
	if x := acquireAs(t, s, "k", "x", "nonce-x"); x.Token <= tok {
		t.Fatalf("token %d after the forced release, not above %d", x.Token, tok)
	}
}

// TestHandOffWakesCandidate: a candidate's Client.Acquire waiting for the
// key returns as soon as the holder hands it off, long before the
// holder's TTL would have let it in.
func TestHandOffWakesCandidate(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	holder, err := lease.NewClient(s, lease.ClientOptions{Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	cand, err := lease.NewClient(s, lease.ClientOptions{Owner: "b"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h, err := holder.TryAcquire(ctx, "k", p)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		h   *lease.Handle
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, err := cand.Acquire(ctx, "k", p)
		done <- result{h, err}
	}()
	// The candidate waits once its watch of the key is marked.
	eventually(t, "the candidate waits", func() bool {
		var marked bool
		err := pool.QueryRow(ctx, `SELECT watched_until IS NOT NULL FROM `+s.Table()+` WHERE key = 'k'`).Scan(&marked)
		return err == nil && marked && leasepostgres.Listening(s)
	})
	leasepostgres.WaitMarked(s)
	if err := h.HandOff(ctx, lease.Offer{Candidates: []string{"b"}}); err != nil {
		t.Fatalf("HandOff: %v", err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("the candidate's Acquire: %v", r.err)
		}
		rec := inspect(t, s, "k")
		if r.h.Token() != rec.Token || rec.Owner != "b" || !rec.Held {
			t.Fatalf("the candidate holds token %d; Inspect: %+v", r.h.Token(), rec)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the candidate's Acquire did not return after the hand-off")
	}
}

// TestPreferred: an Acquire with Preferred that finds the key held records
// its owner as the preferred candidate, which Inspect and List report
// until it lapses or the preferred owner acquires; it never changes who
// gets the key.
func TestPreferred(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	a := acquireAs(t, s, "k", "a", "nonce-a")
	if rec := inspect(t, s, "k"); rec.Preferred != "" {
		t.Fatalf("Preferred %q before anyone asked", rec.Preferred)
	}
	for range 2 {
		if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "b", Nonce: "nonce-b", TTL: time.Minute, Preferred: true}); err == nil {
			t.Fatal("a preferred Acquire took a held key")
		}
		if rec := inspect(t, s, "k"); rec.Preferred != "b" || rec.Owner != "a" || !rec.Held {
			t.Fatalf("Inspect after a preferred Acquire: %+v", rec)
		}
	}
	// A plain Acquire records nothing.
	if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "c", Nonce: "nonce-c", TTL: time.Minute}); err == nil {
		t.Fatal("Acquire took a held key")
	}
	recs, _, err := s.List(ctx, "", "", 10)
	if err != nil || len(recs) != 1 || recs[0].Preferred != "b" {
		t.Fatalf("List: %+v, %v", recs, err)
	}
	// The holder renews and releases as before; then anyone may acquire.
	if err := s.Renew(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	c := acquireAs(t, s, "k", "c", "nonce-c")
	if rec := inspect(t, s, "k"); rec.Preferred != "b" {
		t.Fatalf("Preferred %q after another owner acquired, want b until it lapses", rec.Preferred)
	}
	if err := s.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "b", Nonce: "nonce-b", TTL: time.Minute, Preferred: true}); err != nil {
		t.Fatalf("the preferred owner's Acquire of a free key: %v", err)
	}
	if rec := inspect(t, s, "k"); rec.Preferred != "" || rec.Owner != "b" {
		t.Fatalf("Inspect after the preferred owner acquired: %+v", rec)
	}
	// A preferred candidate lapses with its request's TTL.
	if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "d", Nonce: "nonce-d", TTL: time.Minute, Preferred: true}); err == nil {
		t.Fatal("a preferred Acquire took a held key")
	}
	if _, err := pool.Exec(ctx, `UPDATE `+s.Table()+` SET preferred_until = statement_timestamp() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if rec := inspect(t, s, "k"); rec.Preferred != "" {
		t.Fatalf("Preferred %q after it lapsed", rec.Preferred)
	}
}

// quiet fails the test if c received a value.
func quiet(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-c:
		t.Fatalf("%s: woken", what)
	default:
	}
}

// TestWatchChanges: a change watch is woken when it is in place and by
// every change of the key's holder or state (grant, release, hand-off,
// forced release, new preferred candidate), and again when the listener
// listens anew; a release watch of the same key only by what frees it.
func TestWatchChanges(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	a := acquireAs(t, s, "k", "a", "nonce-a")
	changes, stop, err := s.WatchChanges(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	receive(t, "the change watch in place", changes)
	releases := watch(t, s, "k")
	settle(t, s, pool, changes, releases)

	steps := []struct {
		name  string
		do    func()
		frees bool
	}{
		{"release", func() {
			if err := s.Release(ctx, a); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"grant", func() { a = acquireAs(t, s, "k", "a", "nonce-a2") }, false},
		{"preferred", func() {
			if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "p", Nonce: "nonce-p", TTL: time.Minute, Preferred: true}); err == nil {
				t.Fatal("granted")
			}
		}, false},
		{"hand-off", func() {
			if _, err := s.HandOff(ctx, a, lease.Offer{Candidates: []string{"b"}, Window: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"grant to the candidate", func() { a = acquireAs(t, s, "k", "b", "nonce-b") }, false},
		{"force release", func() {
			if _, err := s.ForceRelease(ctx, "k", 0); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for _, st := range steps {
		st.do()
		receive(t, "change watch, "+st.name, changes)
		if st.frees {
			receive(t, "release watch, "+st.name, releases)
		} else {
			quiet(t, "release watch, "+st.name, releases)
		}
	}
	// Neither a renewal, nor the same preferred candidate again, nor an
	// Acquire retried by the holder is a change.
	a = acquireAs(t, s, "k", "a", "nonce-a3")
	settle(t, s, pool, changes, releases)
	if err := s.Renew(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	acquireAs(t, s, "k", "a", "nonce-a3")
	for range 2 {
		if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "p", Nonce: "nonce-p", TTL: time.Minute, Preferred: true}); err == nil {
			t.Fatal("granted")
		}
	}
	quiet(t, "change watch, a renewal, a retried Acquire, the same preferred candidate again", changes)

	// The listener listens anew: every change watch is woken, a release
	// watch of a held key is not.
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`); err != nil {
		t.Fatal(err)
	}
	receive(t, "change watch, the listener listens anew", changes)
	quiet(t, "release watch of a held key, the listener listens anew", releases)
}

// TestHandOffUnsupportedArgs: HandOff refuses an offer without candidates
// or window before sending anything.
func TestHandOffUnsupportedArgs(t *testing.T) {
	t.Parallel()
	s, _ := freshStore(t, leasepostgres.Options{})
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	a := lease.Acquisition{Key: "k", Nonce: "n", Token: 1}
	for _, o := range []lease.Offer{{Window: time.Second}, {Candidates: []string{"b"}}, {Candidates: []string{"b\x01c"}, Window: time.Second}} {
		if _, err := s.HandOff(ctx, a, o); !errors.Is(err, lease.ErrInvalidOffer) || !strings.Contains(err.Error(), `hand off "k"`) {
			t.Fatalf("HandOff(%+v): %v, want ErrInvalidOffer naming the key, before anything is sent", o, err)
		}
	}
}

// TestWatchMarksAKeyWithoutARow: a watch of a key that has no row inserts
// one that holds nothing, so that the key's first grant is announced;
// Inspect and List do not show it, the first grant counts no transition,
// and Sweep removes it once its mark lapsed a retention ago.
func TestWatchMarksAKeyWithoutARow(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{Retention: time.Hour})
	ctx := ctxT(t)
	changes, stop, err := s.WatchChanges(ctx, "fresh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	receive(t, "the change watch in place", changes)
	watch(t, s, "gone")
	settle(t, s, pool, changes)
	if rec := inspect(t, s, "fresh"); rec.Token != 0 || rec.Held || rec.Ending != lease.EndUnknown || !rec.AcquiredAt.IsZero() || rec.Transitions != 0 {
		t.Fatalf("Inspect of a watched key never acquired: %+v", rec)
	}
	if recs, _, err := s.List(ctx, "", "", 10); err != nil || len(recs) != 0 {
		t.Fatalf("List with only watched keys never acquired: %+v, %v", recs, err)
	}
	a := acquireAs(t, s, "fresh", "a", "nonce-a")
	receive(t, "the first grant of a key", changes)
	if rec := inspect(t, s, "fresh"); !rec.Held || rec.Token != a.Token || rec.Transitions != 0 {
		t.Fatalf("Inspect after the first grant: %+v", rec)
	}
	if _, err := pool.Exec(ctx, `UPDATE `+s.Table()+` SET watched_until = statement_timestamp() - interval '2 hours' WHERE key = 'gone'`); err != nil {
		t.Fatal(err)
	}
	page, err := s.Sweep(ctx, lease.SweepOptions{Limit: 100})
	if err != nil || !slices.Equal(page.Removed, []string{"gone"}) {
		t.Fatalf("Sweep removed %q, %v; want the row of the key whose mark lapsed", page.Removed, err)
	}
}
