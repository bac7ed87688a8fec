package cache_test

import (
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"
	"pgregory.net/rapid"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/cache"
	"github.com/golib/lease/lease"
)

// noServer is a valkey.Client that is never called: naming does no I/O.
type noServer struct{ valkey.Client }

// TestEntryNames pins the names of an entry to the layout of the package
// documentation, the module's one encoding (package keyspace): the
// refresh lease's record, and the entry's keys and channel under the
// Cache's prefix with the record's hash tag. Keys are drawn rich in the
// bytes the encoding escapes. The Sweeper reads each mark's name back to
// its entry, and no other name as a mark.
func TestEntryNames(t *testing.T) {
	store, err := leasevalkey.New(noServer{}, leasevalkey.Options{Prefix: "l:"})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := lease.NewClient(store, lease.ClientOptions{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	keys := rapid.OneOf(
		rapid.StringMatching(`[a%{}/:2F7BD]{1,8}`),
		rapid.StringMatching(`(a|\{|\}|\{a\}|/permit/|permit/|0|7|:){1,6}`),
		rapid.StringN(1, 16, 64),
	).
		Filter(func(k string) bool { return lease.ValidateKey("c/%:"+k) == nil })
	rapid.Check(t, func(t *rapid.T) {
		prefix := rapid.SampledFrom([]string{"c/%:", cache.DefaultPrefix}).Draw(t, "prefix")
		c, err := cache.New(noServer{}, leases, cache.Options{Prefix: prefix, TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		key := keys.Draw(t, "key")
		record, value, fresh, mark, channel := c.EntryNames(key)
		lk := prefix + key
		if c.LeaseKey(key) != lk {
			t.Fatalf("LeaseKey(%q) = %q, want %q", key, c.LeaseKey(key), lk)
		}
		base := prefix + store.RecordKey(lk)[len(store.Prefix()):]
		if !strings.HasPrefix(base, prefix+store.HashTag(lk)) {
			t.Fatalf("the record %q of %q does not start with its hash tag %q", store.RecordKey(lk), lk, store.HashTag(lk))
		}
		sweeper, err := cache.NewSweeper(noServer{}, store, prefix)
		if err != nil {
			t.Fatal(err)
		}
		if gotKey, gotRecord, ok := sweeper.ParseMark(mark); !ok || gotKey != lk || gotRecord != store.RecordKey(lk) {
			t.Fatalf("the sweeper reads mark %q as %q, %q, %v; want %q, %q", mark, gotKey, gotRecord, ok, lk, store.RecordKey(lk))
		}
		for _, name := range []string{record, value, fresh, channel} {
			if k, _, ok := sweeper.ParseMark(name); ok {
				t.Fatalf("the sweeper reads %q, which is no mark, as the mark of %q", name, k)
			}
		}
		for _, n := range []struct{ what, got, want string }{
			{"record", record, store.RecordKey(lk)},
			{"value", value, base + ":value"},
			{"fresh marker", fresh, base + ":fresh"},
			{"invalidation mark", mark, base + ":invalidated"},
			{"channel", channel, base + ":published"},
		} {
			if n.got != n.want {
				t.Fatalf("%s of %q is %q, want %q", n.what, key, n.got, n.want)
			}
		}
	})
}
