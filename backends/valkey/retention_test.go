package valkey_test

import (
	"strconv"
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
