package keyspace_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/golib/lease/internal/keyspace"
)

// leaseKeys draws lease keys rich in what the record layout looks at:
// braces (hash tags, empty or not, unclosed), the permit separator and
// slots (canonical or not), and the separators and escapes of the names.
var leaseKeys = rapid.OneOf(
	rapid.StringMatching(`(a|b|\{|\}|/|%|%7B|:|\{a\}|\{\}|permit|/permit/|:permit:|0|1|12|01|/permits){1,6}`),
	rapid.StringMatching(`[ab{}/%:07]{1,10}`),
	names,
).Filter(func(k string) bool { return k != "" }) // lease keys are not empty

// recordPrefixes draws prefixes of the lease Store: anything but braces.
var recordPrefixes = rapid.StringMatching(`[a-z:/%]{0,6}`)

// permitKey is lease.PermitKey.
func permitKey(sem string, slot int) string { return sem + "/permit/" + strconv.Itoa(slot) }

// TestRecordIsOneToOne: the records of different keys differ, each parses
// back into its key, and each lies in the hash slot the layout promises.
func TestRecordIsOneToOne(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := recordPrefixes.Draw(t, "prefix")
		k1, k2 := leaseKeys.Draw(t, "k1"), leaseKeys.Draw(t, "k2")
		r1, r2 := keyspace.Record(p, k1), keyspace.Record(p, k2)
		if (r1 == r2) != (k1 == k2) {
			t.Fatalf("Record(%q) = %q and Record(%q) = %q", k1, r1, k2, r2)
		}
		if got, ok := keyspace.ParseRecord(p, r1); !ok || got != k1 {
			t.Fatalf("ParseRecord(Record(%q) = %q) = %q, %v", k1, r1, got, ok)
		}
		tag := keyspace.RecordTag(k1)
		if !strings.HasPrefix(r1, p+"{"+tag+"}") || HashTag(r1) != tag {
			t.Fatalf("Record(%q) = %q, whose hash tag is %q, not RecordTag %q", k1, r1, HashTag(r1), tag)
		}
		// The channel that announces a release is in the record's slot.
		// Channels are a namespace of their own on the server, apart from
		// keys: one to one among themselves, as records are.
		if HashTag(r1+":released") != tag {
			t.Fatalf("the release channel of %q is not in its record's slot", k1)
		}
	})
}

// TestRecordSlots: keys tagged alike share a slot, as do the permits of a
// semaphore and its token key; other keys keep the layout from before
// permits and tags, prefix{Escape(key)}.
func TestRecordSlots(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := recordPrefixes.Draw(t, "prefix")
		k := leaseKeys.Draw(t, "key")
		if tag := HashTag(k); tag != k {
			if HashTag(keyspace.Record(p, k)) != tag {
				t.Fatalf("Record(%q) = %q is not in the slot of the key's own tag %q", k, keyspace.Record(p, k), tag)
			}
			other := leaseKeys.Draw(t, "before") + "{" + tag + "}" + leaseKeys.Draw(t, "after")
			if HashTag(other) == tag && HashTag(keyspace.Record(p, other)) != HashTag(keyspace.Record(p, k)) {
				t.Fatalf("%q and %q, tagged alike, have records %q and %q in different slots",
					k, other, keyspace.Record(p, k), keyspace.Record(p, other))
			}
			return
		}
		sem := k
		i, j := rapid.IntRange(0, 300).Draw(t, "i"), rapid.IntRange(0, 300).Draw(t, "j")
		pi, pj := keyspace.Record(p, permitKey(sem, i)), keyspace.Record(p, permitKey(sem, j))
		tokens := keyspace.PermitTokens(p, sem)
		if HashTag(pi) != HashTag(pj) || HashTag(tokens) != HashTag(pi) {
			t.Fatalf("permits %d and %d of %q and its token key are %q, %q and %q: not in one slot", i, j, sem, pi, pj, tokens)
		}
		if pi != p+"{"+keyspace.Escape(sem)+"}:permit:"+strconv.Itoa(i) {
			t.Fatalf("the record of permit %d of %q is %q", i, sem, pi)
		}
		if _, _, isPermit := strings.Cut(k, "/permit/"); !isPermit {
			if r := keyspace.Record(p, k); r != keyspace.Name(p, keyspace.Tag(k), "") {
				t.Fatalf("Record(%q) = %q, not the layout of before, %q", k, r, keyspace.Name(p, keyspace.Tag(k), ""))
			}
		}
	})
}

// TestPermitTokensAreNoRecords: the token key of a semaphore is no
// record's name and no release channel's, and semaphores have different
// token keys.
func TestPermitTokensAreNoRecords(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := recordPrefixes.Draw(t, "prefix")
		s1, s2 := leaseKeys.Draw(t, "sem1"), leaseKeys.Draw(t, "sem2")
		n1, n2 := keyspace.PermitTokens(p, s1), keyspace.PermitTokens(p, s2)
		if (n1 == n2) != (s1 == s2) {
			t.Fatalf("PermitTokens(%q) = %q and PermitTokens(%q) = %q", s1, n1, s2, n2)
		}
		if k, ok := keyspace.ParseRecord(p, n1); ok {
			t.Fatalf("the token key %q of %q is the record of %q", n1, s1, k)
		}
		if strings.HasSuffix(n1, ":released") {
			t.Fatalf("the token key %q of %q is named like a release channel", n1, s1)
		}
	})
}

// TestParseRecordAcceptsOnlyRecords: whatever name ParseRecord accepts is
// the record of the key it returns, and it refuses what is near one.
func TestParseRecordAcceptsOnlyRecords(t *testing.T) {
	nameGen := rapid.StringMatching(`(p:|\{|\}|a|%7B|%7D|%2F|%|/|:|permit|:permit:|0|1|01){0,8}`)
	rapid.Check(t, func(t *rapid.T) {
		p := rapid.SampledFrom([]string{"", "p:", "a%:"}).Draw(t, "prefix")
		name := nameGen.Draw(t, "name")
		if k, ok := keyspace.ParseRecord(p, name); ok && keyspace.Record(p, k) != name {
			t.Fatalf("ParseRecord(%q) = %q, whose record is %q", name, k, keyspace.Record(p, k))
		}
	})
	for _, name := range []string{
		"p:", "p:{", "p:{a", "p:a}", "p:{a}x", "p:{a}:", "p:{a}:permit:", "p:{a}:permit:01", "p:{a}:permit:1x",
		"p:{a}:%7Bb%7D", "p:{b}:%7Ba%7D", "p:{a}:a", "p:{%7Ba%7D}", "p:{a%2Fpermit%2F1}", "p:{a}/permits", "p:{a}:released",
	} {
		if k, ok := keyspace.ParseRecord("p:", name); ok {
			t.Errorf("ParseRecord(%q) = %q, true; want false", name, k)
		}
	}
}

// TestIsPermit: IsPermit splits nowhere in particular, and agrees with
// the layout of Record.
func TestIsPermit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := leaseKeys.Draw(t, "key")
		cut := rapid.IntRange(0, len(k)).Draw(t, "cut")
		want := strings.Contains(keyspace.Record("p:", k), "}:permit:")
		if HashTag(k) != k { // a tagged permit has the layout of tagged keys
			want = regexp.MustCompile(`./permit/(0|[1-9][0-9]*)$`).MatchString(k)
		}
		if got := keyspace.IsPermit(k[:cut], k[cut:]); got != want {
			t.Fatalf("IsPermit(%q, %q) = %v, want %v", k[:cut], k[cut:], got, want)
		}
	})
	if n := testing.AllocsPerRun(100, func() { _ = keyspace.IsPermit("cache:", "exports/permit/12") }); n != 0 {
		t.Errorf("IsPermit allocates %v times", n)
	}
}

// TestRecordExamples pins the layout the package documentation shows.
func TestRecordExamples(t *testing.T) {
	for _, c := range []struct{ key, record string }{
		{"billing/nightly", "lease:{billing%2Fnightly}"},
		{"a{}b", "lease:{a%7B%7Db}"},
		{"{acct}/17", "lease:{acct}:%7Bacct%7D%2F17"},
		{"x{a{b}c}", "lease:{a{b}:x%7Ba%7Bb%7Dc%7D"},
		{"{tenant/42}/job", "lease:{tenant/42}:%7Btenant%2F42%7D%2Fjob"},
		{"exports/permit/3", "lease:{exports}:permit:3"},
		{"exports/permit/03", "lease:{exports%2Fpermit%2F03}"},
		{"/permit/3", "lease:{%2Fpermit%2F3}"},
		{"{t}/sem/permit/3", "lease:{t}:%7Bt%7D%2Fsem%2Fpermit%2F3"},
	} {
		if got := keyspace.Record("lease:", c.key); got != c.record {
			t.Errorf("Record(%q) = %q, want %q", c.key, got, c.record)
		}
	}
	if got := keyspace.PermitTokens("lease:", "exports"); got != "lease:{exports}/permits" {
		t.Errorf("PermitTokens(exports) = %q", got)
	}
	if got := keyspace.PermitTokens("lease:", "{t}/sem"); got != "lease:{t}:%7Bt%7D%2Fsem/permits" {
		t.Errorf("PermitTokens({t}/sem) = %q", got)
	}
}

// FuzzParseRecord: ParseRecord accepts a name only if it is the record of
// the key it returns, and never panics.
func FuzzParseRecord(f *testing.F) {
	for _, s := range []string{"lease:{a}", "lease:{a}:permit:0", "lease:{a}:%7Ba%7D", "lease:{a}:%7Bb%7D", "lease:{%7B}", "lease:{}", "lease:{a}/permits"} {
		f.Add("lease:", s)
	}
	f.Fuzz(func(t *testing.T, prefix, name string) {
		if strings.ContainsAny(prefix, "{}") {
			return
		}
		k, ok := keyspace.ParseRecord(prefix, name)
		if !ok {
			return
		}
		if r := keyspace.Record(prefix, k); r != name {
			t.Fatalf("ParseRecord(%q, %q) = %q, whose record is %q", prefix, name, k, r)
		}
	})
}
