package valkey_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/lease"
)

// pttl returns the PTTL of name: -2 if there is no such key, -1 if it has
// no TTL.
func pttl(t *testing.T, c valkey.Client, name string) int64 {
	t.Helper()
	n, err := c.Do(ctxT(t), c.B().Pttl().Key(name).Build()).AsInt64()
	if err != nil {
		t.Fatalf("PTTL %s: %v", name, err)
	}
	return n
}

// expiresOf returns the expires field of key's record on s.
func expiresOf(t *testing.T, c valkey.Client, s *leasevalkey.Store, key string) int64 {
	t.Helper()
	n, err := c.Do(ctxT(t), c.B().Hget().Key(s.RecordKey(key)).Field("expires").Build()).AsInt64()
	if err != nil {
		t.Fatalf("HGET expires of %q: %v", key, err)
	}
	return n
}

// waitServer waits until the server's clock has reached micros.
func waitServer(t *testing.T, c valkey.Client, micros int64) {
	t.Helper()
	for serverMicros(t, c) < micros {
		time.Sleep(10 * time.Millisecond)
	}
}

// sweepAll walks s to the end in pages of limit records and returns the
// keys removed (or, with dryRun, that would be), sorted.
func sweepAll(t *testing.T, s *leasevalkey.Store, limit int, dryRun bool) []string {
	t.Helper()
	var removed []string
	for cursor, pages := "", 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("Sweep did not end its walk after 10000 pages")
		}
		page, err := s.Sweep(ctxT(t), lease.SweepOptions{Cursor: cursor, Limit: limit, DryRun: dryRun})
		if err != nil {
			t.Fatalf("Sweep (page %d): %v", pages, err)
		}
		removed = append(removed, page.Removed...)
		if cursor = page.Next; cursor == "" {
			slices.Sort(removed)
			return removed
		}
	}
}

func TestRetentionOption(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	for _, tc := range []struct {
		retention, want time.Duration
	}{
		{0, lease.DefaultRetention},
		{lease.KeepForever, lease.KeepForever},
		{time.Nanosecond, time.Nanosecond},
		{time.Hour, time.Hour},
	} {
		s, err := leasevalkey.New(c, leasevalkey.Options{Retention: tc.retention})
		if err != nil || s.Retention() != tc.want {
			t.Errorf("New(Retention %v): Retention() %v, %v; want %v", tc.retention, s.Retention(), err, tc.want)
		}
	}
	for _, r := range []time.Duration{-2, -time.Hour} {
		if _, err := leasevalkey.New(c, leasevalkey.Options{Retention: r}); err == nil {
			t.Errorf("New(Retention %v) succeeded", r)
		}
	}
}

// TestReleasedRecordEndsAfterRetention: a released key's record carries
// the retention as its TTL and is gone after it, and the next token is
// still higher.
func TestReleasedRecordEndsAfterRetention(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	const retention = 300 * time.Millisecond
	s := newStoreWith(t, c, leasevalkey.Options{Retention: retention})
	rec := s.RecordKey("k")
	a := acquire(t, s, "k", "o", time.Minute)
	if p := pttl(t, c, rec); p != -1 {
		t.Fatalf("held record: PTTL %d, want -1 (no TTL)", p)
	}
	if err := s.Release(ctxT(t), a); err != nil {
		t.Fatal(err)
	}
	if p := pttl(t, c, rec); p <= 0 || p > retention.Milliseconds() {
		t.Fatalf("released record: PTTL %d ms, want the retention, %v", p, retention)
	}
	if r, err := s.Inspect(ctxT(t), "k"); err != nil || r.Held || r.Token != a.Token {
		t.Fatalf("Inspect within the retention = %+v, %v; want free with token %d", r, err, a.Token)
	}
	deadline := time.Now().Add(10 * time.Second)
	for pttl(t, c, rec) != -2 {
		if time.Now().After(deadline) {
			t.Fatalf("released record still exists 10s after a retention of %v", retention)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b := acquire(t, s, "k", "o", time.Minute)
	if b.Token <= a.Token {
		t.Fatalf("token after the record ended: %d, want above the last, %d", b.Token, a.Token)
	}
	if p := pttl(t, c, rec); p != -1 {
		t.Fatalf("new record: PTTL %d, want -1", p)
	}
}

// TestAcquireRemovesTheTTL: a lease granted on a record that carries a TTL
// (the retention of its last release, or one an older version of this
// package left on a record it acquired) leaves the record without one, so
// that no volatile-* policy evicts it and it does not vanish while held.
func TestAcquireRemovesTheTTL(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	s := newStoreWith(t, c, leasevalkey.Options{Retention: time.Hour})
	rec := s.RecordKey("k")
	a := acquire(t, s, "k", "o", time.Minute)
	if err := s.Release(ctxT(t), a); err != nil {
		t.Fatal(err)
	}
	if p := pttl(t, c, rec); p <= 0 {
		t.Fatalf("released record: PTTL %d, want the retention", p)
	}
	b := acquire(t, s, "k", "o", time.Minute)
	if p := pttl(t, c, rec); p != -1 {
		t.Fatalf("record acquired again after its release: PTTL %d ms, want -1: a held lease's record with a TTL can be evicted, and ends while held", p)
	}
	// A retry of the same acquisition extends it, and removes a TTL too.
	if err := c.Do(ctxT(t), c.B().Pexpire().Key(rec).Milliseconds(60000).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	tok, err := s.Acquire(ctxT(t), lease.AcquireRequest{Key: "k", Owner: "o", Nonce: b.Nonce, TTL: time.Minute})
	if err != nil || tok != b.Token {
		t.Fatalf("Acquire again with the same nonce = %d, %v; want %d", tok, err, b.Token)
	}
	if p := pttl(t, c, rec); p != -1 {
		t.Fatalf("record of an extended acquisition: PTTL %d ms, want -1", p)
	}
}

// TestForceReleaseGivesTheRetention: a force-released record carries the
// retention as its TTL.
func TestForceReleaseGivesTheRetention(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	s := newStoreWith(t, c, leasevalkey.Options{Retention: time.Hour})
	for _, byToken := range []bool{false, true} {
		key := "forced/" + strconv.FormatBool(byToken)
		a := acquire(t, s, key, "o", time.Minute)
		tok := lease.Token(0)
		if byToken {
			tok = a.Token
		}
		if prev, err := s.ForceRelease(ctxT(t), key, tok); err != nil || !prev.Held {
			t.Fatalf("ForceRelease(%q, %d) = %+v, %v", key, tok, prev, err)
		}
		if p := pttl(t, c, s.RecordKey(key)); p <= 0 || p > time.Hour.Milliseconds() {
			t.Fatalf("force-released record of %q: PTTL %d ms, want the retention, 1h", key, p)
		}
	}
}

// TestKeepForever: with lease.KeepForever no record ever gets a TTL and
// Sweep removes nothing.
func TestKeepForever(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	s := newStoreWith(t, c, leasevalkey.Options{Retention: lease.KeepForever})
	a := acquire(t, s, "released", "o", time.Minute)
	if err := s.Release(ctxT(t), a); err != nil {
		t.Fatal(err)
	}
	acquire(t, s, "forced", "o", time.Minute)
	if _, err := s.ForceRelease(ctxT(t), "forced", 0); err != nil {
		t.Fatal(err)
	}
	acquire(t, s, "crashed", "o", time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if got := sweepAll(t, s, 10, false); len(got) != 0 {
		t.Fatalf("Sweep with KeepForever removed %q", got)
	}
	for _, k := range []string{"released", "forced", "crashed"} {
		if p := pttl(t, c, s.RecordKey(k)); p != -1 {
			t.Errorf("record of %q with KeepForever: PTTL %d, want -1", k, p)
		}
	}
}

// TestSweepRemovesCrashedHolders: the record of a lease that expired
// without a release is removed by Sweep once the retention has passed
// since its expiry, not before; live and released records never are. On a
// cluster the records are spread over every primary.
func TestSweepRemovesCrashedHolders(t *testing.T) {
	t.Parallel()
	for _, topo := range []struct {
		name   string
		client func(testing.TB) valkey.Client
	}{{"standalone", standalone}, {"cluster", cluster}} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			c := topo.client(t)
			const retention = time.Second
			s := newStoreWith(t, c, leasevalkey.Options{Retention: retention})
			var crashed []string
			tokens := make(map[string]lease.Token)
			for i := range 12 {
				k := fmt.Sprintf("crashed/%d", i)
				crashed = append(crashed, k)
				tokens[k] = acquire(t, s, k, "o", 200*time.Millisecond).Token // never released
			}
			slices.Sort(crashed)
			live := acquire(t, s, "live", "o", time.Hour)
			released := acquire(t, s, "released", "o", time.Hour)
			if err := s.Release(ctxT(t), released); err != nil {
				t.Fatal(err)
			}
			first, last := expiresOf(t, c, s, crashed[0]), int64(0)
			for _, k := range crashed {
				e := expiresOf(t, c, s, k)
				first, last = min(first, e), max(last, e)
			}
			untouched := func(phase string) {
				t.Helper()
				for _, k := range crashed {
					if p := pttl(t, c, s.RecordKey(k)); p != -1 {
						t.Fatalf("%s: record of %q has PTTL %d, want -1 (there, untouched)", phase, k, p)
					}
				}
			}
			if got := sweepAll(t, s, 5, false); len(got) != 0 {
				t.Fatalf("Sweep while the leases are held removed %q", got)
			}
			untouched("held")

			// Expired, within the retention.
			waitServer(t, c, last+100_000)
			got := sweepAll(t, s, 5, false)
			if serverMicros(t, c) < first+retention.Microseconds() {
				if len(got) != 0 {
					t.Fatalf("Sweep within the retention of the expired leases removed %q", got)
				}
				untouched("expired within the retention")
			} else {
				t.Logf("the sweep within the retention took too long to tell (%d keys removed)", len(got))
			}

			// Past the retention: a dry run lists them and removes nothing,
			// then Sweep removes them.
			waitServer(t, c, last+retention.Microseconds()+10_000)
			if got := sweepAll(t, s, 5, true); !slices.Equal(got, crashed) {
				t.Fatalf("dry run past the retention lists %q, want %q", got, crashed)
			}
			untouched("after the dry run")
			if got := sweepAll(t, s, 5, false); !slices.Equal(got, crashed) {
				t.Fatalf("Sweep past the retention removed %q, want %q", got, crashed)
			}
			for _, k := range crashed {
				if p := pttl(t, c, s.RecordKey(k)); p != -2 {
					t.Fatalf("record of %q after Sweep: PTTL %d, want -2 (gone)", k, p)
				}
			}
			if got := sweepAll(t, s, 5, false); len(got) != 0 {
				t.Fatalf("second Sweep removed %q", got)
			}
			if r, err := s.Inspect(ctxT(t), "live"); err != nil || !r.Held || r.Token != live.Token {
				t.Fatalf("live lease after Sweep: %+v, %v", r, err)
			}
			if p := pttl(t, c, s.RecordKey("live")); p != -1 {
				t.Fatalf("live record after Sweep: PTTL %d, want -1", p)
			}
			for _, k := range crashed {
				if a := acquire(t, s, k, "o", time.Minute); a.Token <= tokens[k] {
					t.Fatalf("token of %q after Sweep removed its record: %d, want above %d", k, a.Token, tokens[k])
				}
			}
		})
	}
}

// TestSweepGivesOldRecordsTheRetention: a released or force-released
// record without a TTL, as an older version of this package left them,
// gets the retention as its TTL from Sweep and is not counted as removed;
// a TTL a record has is kept, so that repeated sweeps do not keep a record
// forever; a dry run changes nothing.
func TestSweepGivesOldRecordsTheRetention(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	const retention = time.Hour
	s := newStoreWith(t, c, leasevalkey.Options{Retention: retention})
	for k, expires := range map[string]string{"old/released": "0", "old/forced": "-1"} {
		if err := c.Do(ctxT(t), c.B().Hset().Key(s.RecordKey(k)).FieldValue().FieldValue("token", "5").FieldValue("owner", "o").FieldValue("nonce", "n").FieldValue("expires", expires).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	a := acquire(t, s, "released", "o", time.Minute)
	if err := s.Release(ctxT(t), a); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctxT(t), c.B().Pexpire().Key(s.RecordKey("released")).Milliseconds(5000).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got := sweepAll(t, s, 10, true); len(got) != 0 {
		t.Fatalf("dry run listed %q, want nothing", got)
	}
	for _, k := range []string{"old/released", "old/forced"} {
		if p := pttl(t, c, s.RecordKey(k)); p != -1 {
			t.Fatalf("record of %q after a dry run: PTTL %d, want -1", k, p)
		}
	}
	if got := sweepAll(t, s, 10, false); len(got) != 0 {
		t.Fatalf("Sweep removed %q, want nothing counted", got)
	}
	for _, k := range []string{"old/released", "old/forced"} {
		if p := pttl(t, c, s.RecordKey(k)); p <= 0 || p > retention.Milliseconds() {
			t.Fatalf("record of %q after Sweep: PTTL %d, want the retention", k, p)
		}
	}
	if p := pttl(t, c, s.RecordKey("released")); p <= 0 || p > 5000 {
		t.Fatalf("released record with a TTL of 5s after Sweep: PTTL %d, want its TTL kept", p)
	}
}

// TestSweepTouchesOnlyLeaseRecords: what lies under the prefix but is not
// a lease record, and the records of another prefix, are left alone.
func TestSweepTouchesOnlyLeaseRecords(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	s := newStoreWith(t, c, leasevalkey.Options{Retention: time.Millisecond})
	other := newStoreWith(t, c, leasevalkey.Options{Retention: time.Millisecond})
	acquire(t, s, "crashed", "o", time.Millisecond)
	acquire(t, other, "crashed", "o", time.Millisecond)
	expired := strconv.FormatInt(serverMicros(t, c)-int64(time.Hour/time.Microsecond), 10)
	foreign := map[string]valkey.Completed{
		// A hash at a record's name, without a token.
		s.RecordKey("no-token"): c.B().Hset().Key(s.RecordKey("no-token")).FieldValue().FieldValue("expires", expired).Build(),
		// A string at a record's name.
		s.RecordKey("string"): c.B().Set().Key(s.RecordKey("string")).Value("x").Build(),
		// A hash shaped like an expired record, at a name no record has.
		s.Prefix() + "not-a-record":    c.B().Hset().Key(s.Prefix()+"not-a-record").FieldValue().FieldValue("token", "1").FieldValue("expires", expired).Build(),
		s.RecordKey("x") + ":released": c.B().Hset().Key(s.RecordKey("x")+":released").FieldValue().FieldValue("token", "1").FieldValue("expires", expired).Build(),
	}
	for _, cmd := range foreign {
		if err := c.Do(ctxT(t), cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if got := sweepAll(t, s, 10, false); !slices.Equal(got, []string{"crashed"}) {
		t.Fatalf("Sweep removed %q, want [crashed]", got)
	}
	for name := range foreign {
		if p := pttl(t, c, name); p != -1 {
			t.Errorf("%q after Sweep: PTTL %d, want -1 (untouched)", name, p)
		}
	}
	if p := pttl(t, c, other.RecordKey("crashed")); p != -1 {
		t.Errorf("another prefix's record after Sweep: PTTL %d, want -1 (untouched)", p)
	}
}

func TestSweepRejectsBadPages(t *testing.T) {
	t.Parallel()
	s := newStore(t, standalone(t))
	if _, err := s.Sweep(ctxT(t), lease.SweepOptions{Limit: 0}); err == nil {
		t.Error("Sweep with Limit 0 succeeded")
	}
	if _, err := s.Sweep(ctxT(t), lease.SweepOptions{Cursor: "nonsense", Limit: 1}); err == nil {
		t.Error("Sweep from a cursor it did not return succeeded")
	}
}

// TestSweepRacesAcquisitions sweeps, with a retention of a few
// milliseconds, while holders acquire and release keys, or let their
// leases expire as crashed holders do: every token a key is granted is
// above the one before.
func TestSweepRacesAcquisitions(t *testing.T) {
	t.Parallel()
	for _, topo := range []struct {
		name   string
		client func(testing.TB) valkey.Client
	}{{"standalone", standalone}, {"cluster", cluster}} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			c := topo.client(t)
			s := newStoreWith(t, c, leasevalkey.Options{Retention: 5 * time.Millisecond})
			ctx := ctxT(t)
			stop := time.Now().Add(2 * time.Second)
			var removed, grants atomic.Int64
			var wg sync.WaitGroup
			done := make(chan struct{})
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					for cursor := ""; ; {
						page, err := s.Sweep(ctx, lease.SweepOptions{Cursor: cursor, Limit: 3})
						if err != nil {
							t.Errorf("Sweep: %v", err)
							return
						}
						removed.Add(int64(len(page.Removed)))
						if cursor = page.Next; cursor == "" {
							break
						}
					}
				}
			})
			var holders sync.WaitGroup
			for w := range 6 {
				holders.Go(func() {
					key := fmt.Sprintf("race/%d", w)
					last := lease.Token(0)
					for i := 0; time.Now().Before(stop); i++ {
						a, err := tryAcquire(ctx, s, key, 20*time.Millisecond)
						if err != nil {
							t.Errorf("Acquire(%q): %v", key, err)
							return
						}
						grants.Add(1)
						if a.Token <= last {
							t.Errorf("key %q granted token %d after %d", key, a.Token, last)
							return
						}
						last = a.Token
						switch i % 3 {
						case 0: // released at once (or found expired, on a
							// machine slow enough to take the TTL for it)
							if err := s.Release(ctx, a); err != nil && !errors.Is(err, lease.ErrLost) {
								t.Errorf("Release(%q): %v", key, err)
								return
							}
						case 1: // released after a while
							time.Sleep(time.Duration(i%7) * time.Millisecond)
							if err := s.Release(ctx, a); err != nil && !errors.Is(err, lease.ErrLost) {
								t.Errorf("Release(%q): %v", key, err)
								return
							}
						default: // a crashed holder: the lease expires, and
							// the key may stay unused past the retention
							time.Sleep(time.Duration(20+i%20) * time.Millisecond)
						}
					}
				})
			}
			holders.Wait()
			close(done)
			wg.Wait()
			t.Logf("%d grants, %d records removed by Sweep", grants.Load(), removed.Load())
			if removed.Load() == 0 {
				t.Error("Sweep removed no record: the test did not race it against the holders")
			}
		})
	}
}

// tryAcquire acquires key with a fresh nonce, waiting out the holder (the
// caller's own earlier acquisition) if there is one.
func tryAcquire(ctx context.Context, s *leasevalkey.Store, key string, ttl time.Duration) (lease.Acquisition, error) {
	nonce := rand.Text()
	for {
		tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: "o", Nonce: nonce, TTL: ttl})
		var held *lease.NotAcquiredError
		if errors.As(err, &held) {
			time.Sleep(held.Remaining + time.Millisecond)
			continue
		}
		return lease.Acquisition{Key: key, Owner: "o", Nonce: nonce, Token: tok}, err
	}
}
