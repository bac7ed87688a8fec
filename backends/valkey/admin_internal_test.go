package valkey

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/golib/lease/lease"
)

// TestRecordPrefixAndParse checks, for arbitrary keys, that List's view of
// the record names agrees with recordKey: a record name parses back to its
// key, names that are not records do not parse, and the records of the
// keys with a given prefix all start with recordNamePrefix.
func TestRecordPrefixAndParse(t *testing.T) {
	keyGen := rapid.OneOf(
		rapid.StringMatching(`[a{}%7DB2F/* ]{1,12}`),
		rapid.StringMatching(`(a|\{|\}|\{a\}|/permit/|0|7|:){1,6}`),
		rapid.StringN(1, 64, lease.MaxKeyLen),
	).Filter(func(k string) bool { return lease.ValidateKey(k) == nil })
	rapid.Check(t, func(t *rapid.T) {
		prefix := rapid.StringMatching(`[a-z:/ ]{0,8}`).Draw(t, "prefix")
		k := keyGen.Draw(t, "key")
		p := rapid.StringMatching(`[a{}%7DB2F/* ]{0,4}`).Draw(t, "keyPrefix")
		name := recordKey(prefix, k)
		if got, ok := parseRecordKey(prefix, name); !ok || got != k {
			t.Fatalf("parseRecordKey(%q) = %q, %v; want %q", name, got, ok, k)
		}
		if k2 := k + ":released"; recordKey(prefix, k2) == releaseChannel(name) {
			// The record of k + ":released" may be named as k's release
			// channel: a channel is no key.
			if got, ok := parseRecordKey(prefix, releaseChannel(name)); !ok || got != k2 {
				t.Fatalf("parseRecordKey(%q) = %q, %v; want %q", releaseChannel(name), got, ok, k2)
			}
		} else if got, ok := parseRecordKey(prefix, releaseChannel(name)); ok {
			t.Fatalf("parseRecordKey(%q) = %q, want no key", releaseChannel(name), got)
		}
		others := []string{permitTokensKey(prefix, k)}
		if strings.HasSuffix(name, "}") { // not the record of a key cut short
			others = append(others, name[:len(name)-1])
		}
		for _, other := range others {
			if got, ok := parseRecordKey(prefix, other); ok {
				t.Fatalf("parseRecordKey(%q) = %q, want no key", other, got)
			}
		}
		// The key itself may be shaped like a record name ("{ }" is the
		// record of key " "), but never like its own.
		if got, ok := parseRecordKey(prefix, prefix+k); ok && (got == k || recordKey(prefix, got) != prefix+k) {
			t.Fatalf("parseRecordKey(%q) = %q, whose record is %q; want no key, or a key of its own whose record it is",
				prefix+k, got, recordKey(prefix, got))
		}
		if strings.HasPrefix(k, p) && !strings.HasPrefix(name, recordNamePrefix(prefix, p)) {
			t.Fatalf("key %q has prefix %q, but its record %q does not start with %q", k, p, name, recordNamePrefix(prefix, p))
		}
	})
}
