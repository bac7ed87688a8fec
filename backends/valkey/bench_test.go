package valkey_test

import (
	"context"
	"crypto/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/lease"
)

// BenchmarkAcquire measures Store.Acquire alone, on one connection, one
// call at a time, in the script's three paths: a grant of a free key
// (timed with the Release that frees it again), a refusal (the key is
// held by another acquisition) and an extension (the holder's nonce asks
// again). server-us/op is the server's time in the scripts (EVALSHA in
// INFO commandstats), steadier than ns/op on a shared machine.
func BenchmarkAcquire(b *testing.B) {
	c := standalone(b)
	s := newStore(b, c)
	ctx := context.Background()
	const ttl = time.Minute
	// Each run of a sub-benchmark (the framework runs them more than once)
	// has keys of its own.
	req := func(key string) lease.AcquireRequest {
		return lease.AcquireRequest{Key: key, Owner: "bench", Nonce: rand.Text(), TTL: ttl}
	}
	b.Run("path=grant+release", func(b *testing.B) {
		r := req("grant/" + rand.Text())
		at := scriptMicros(b, c)
		for b.Loop() {
			tok, err := s.Acquire(ctx, r)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Release(ctx, lease.Acquisition{Key: r.Key, Owner: r.Owner, Nonce: r.Nonce, Token: tok}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(scriptMicros(b, c)-at)/float64(b.N), "server-us/op")
	})
	b.Run("path=refused", func(b *testing.B) {
		key := "refused/" + rand.Text()
		if _, err := s.Acquire(ctx, req(key)); err != nil {
			b.Fatal(err)
		}
		r := req(key)
		at := scriptMicros(b, c)
		for b.Loop() {
			if _, err := s.Acquire(ctx, r); err == nil {
				b.Fatal("Acquire of a held key succeeded")
			}
		}
		b.ReportMetric(float64(scriptMicros(b, c)-at)/float64(b.N), "server-us/op")
	})
	b.Run("path=extend", func(b *testing.B) {
		r := req("extend/" + rand.Text())
		at := scriptMicros(b, c)
		for b.Loop() {
			if _, err := s.Acquire(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(scriptMicros(b, c)-at)/float64(b.N), "server-us/op")
	})
}

// scriptMicros returns the microseconds the server spent in EVALSHA so
// far (INFO commandstats).
func scriptMicros(b *testing.B, c valkey.Client) int64 {
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for f := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					return n
				}
			}
		}
	}
	return 0
}
