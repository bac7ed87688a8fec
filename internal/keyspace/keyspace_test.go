package keyspace_test

import (
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/golib/lease/internal/keyspace"
)

// names draws strings rich in the bytes that matter: the reserved ones,
// the hex digits of their escapes, and the separators of the layouts.
var names = rapid.OneOf(
	rapid.StringMatching(`[a%{}/:2579BDF]{0,8}`),
	rapid.StringMatching(`(a|/|items|members|run|slot/1|%2F|%){0,5}`),
	rapid.String(),
)

var unescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}", "%2F", "/")

// TestEscapeIsOneToOne: the escaped form holds no reserved byte but the
// '%' of an escape, turns back into the input, and escapes piece by piece
// as whole.
func TestEscapeIsOneToOne(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := names.Draw(t, "a"), names.Draw(t, "b")
		ea, eb := keyspace.Escape(a), keyspace.Escape(b)
		if strings.ContainsAny(ea, "{}/") {
			t.Fatalf("Escape(%q) = %q holds a brace or a slash", a, ea)
		}
		if back := unescaper.Replace(ea); back != a {
			t.Fatalf("Escape(%q) = %q unescapes to %q", a, ea, back)
		}
		if (ea == eb) != (a == b) {
			t.Fatalf("Escape(%q) = %q, Escape(%q) = %q", a, ea, b, eb)
		}
		if got := keyspace.Escape(a + b); got != ea+eb {
			t.Fatalf("Escape(%q) = %q, not Escape(%q)+Escape(%q) = %q", a+b, got, a, b, ea+eb)
		}
	})
}

// TestEscapeDoesNotAllocateForPlainNames: the cache's hit path counts on it.
func TestEscapeDoesNotAllocateForPlainNames(t *testing.T) {
	s := strings.Repeat("page:home-42 ", 4)
	if n := testing.AllocsPerRun(100, func() { _ = keyspace.Escape(s) }); n != 0 {
		t.Fatalf("Escape of a name without reserved bytes allocates %v times", n)
	}
}

// TestTagIsOneToOne: lists of parts, of any lengths, have equal tags only
// if they are equal, and a tag holds no brace.
func TestTagIsOneToOne(t *testing.T) {
	parts := rapid.SliceOfN(names, 1, 4)
	rapid.Check(t, func(t *rapid.T) {
		p1, p2 := parts.Draw(t, "p1"), parts.Draw(t, "p2")
		t1, t2 := keyspace.Tag(p1...), keyspace.Tag(p2...)
		if strings.ContainsAny(t1, "{}") {
			t.Fatalf("Tag(%q) = %q holds a brace", p1, t1)
		}
		var back []string
		for _, s := range strings.Split(t1, "/") {
			back = append(back, unescaper.Replace(s))
		}
		if !slices.Equal(back, p1) {
			t.Fatalf("Tag(%q) = %q splits back into %q", p1, t1, back)
		}
		if (t1 == t2) != slices.Equal(p1, p2) {
			t.Fatalf("Tag(%q) = %q, Tag(%q) = %q", p1, t1, p2, t2)
		}
	})
}

// TestNameIsOneToOne: names of different (prefix, tag, suffix) differ,
// and the server's hash tag of a name is its tag.
func TestNameIsOneToOne(t *testing.T) {
	prefixes := rapid.StringMatching(`[a-z:/%]{0,6}`)
	suffixes := rapid.SampledFrom([]string{"", ":ready", ":due", ":item", ":a:b", ":released"})
	tags := rapid.SliceOfN(names, 1, 3)
	rapid.Check(t, func(t *rapid.T) {
		pre1, pre2 := prefixes.Draw(t, "prefix1"), prefixes.Draw(t, "prefix2")
		tag1, tag2 := keyspace.Tag(tags.Draw(t, "tag1")...), keyspace.Tag(tags.Draw(t, "tag2")...)
		suf1, suf2 := suffixes.Draw(t, "suffix1"), suffixes.Draw(t, "suffix2")
		n1, n2 := keyspace.Name(pre1, tag1, suf1), keyspace.Name(pre2, tag2, suf2)
		if same := pre1 == pre2 && tag1 == tag2 && suf1 == suf2; (n1 == n2) != same {
			t.Fatalf("Name(%q, %q, %q) = %q and Name(%q, %q, %q) = %q", pre1, tag1, suf1, n1, pre2, tag2, suf2, n2)
		}
		if got := HashTag(n1); got != tag1 && tag1 != "" {
			t.Fatalf("the hash tag of %q is %q, not %q", n1, got, tag1)
		}
	})
}

// TestKindsAreSuffixFree is what makes LeaseKey one to one.
func TestKindsAreSuffixFree(t *testing.T) {
	kinds := keyspace.Kinds()
	for i, a := range kinds {
		for j, b := range kinds {
			if i != j && strings.HasSuffix(a, b) {
				t.Errorf("kind %q ends with kind %q", a, b)
			}
		}
	}
	if len(kinds) != 5+keyspace.SchedulerSlots {
		t.Errorf("Kinds() = %q", kinds)
	}
}

// TestLeaseKeyIsOneToOne: derived lease keys of different namespaces,
// kinds or names differ, whatever the namespaces hold.
func TestLeaseKeyIsOneToOne(t *testing.T) {
	// Pairs that met before the names were escaped.
	for _, c := range [][2][3]string{
		{{"a/", keyspace.QueueItem, "b/items/c"}, {"a/items/b/", keyspace.QueueItem, "c"}},
		{{"g/", keyspace.GroupMember, "x/partitions/y"}, {"g/members/x/", keyspace.GroupPartition, "y"}},
		{{"jobs/", keyspace.SchedulerRun, "slot/0/x"}, {"jobs/run/", keyspace.SchedulerSlot(0), "x"}},
		{{"", keyspace.SchedulerRun, "prune/"}, {"run/", keyspace.QueuePrune, ""}},
	} {
		a, b := c[0], c[1]
		if l := keyspace.LeaseKey(a[0], a[1], a[2]); l == keyspace.LeaseKey(b[0], b[1], b[2]) {
			t.Errorf("LeaseKey%q and LeaseKey%q are both %q", a, b, l)
		}
	}
	kinds := rapid.SampledFrom(keyspace.Kinds())
	rapid.Check(t, func(t *rapid.T) {
		ns1, ns2 := names.Draw(t, "ns1"), names.Draw(t, "ns2")
		k1, k2 := kinds.Draw(t, "kind1"), kinds.Draw(t, "kind2")
		x1, x2 := names.Draw(t, "x1"), names.Draw(t, "x2")
		if rapid.Bool().Draw(t, "queue-like") { // a name and '/' as namespace
			ns1, ns2 = ns1+"/", ns2+"/"
		}
		l1, l2 := keyspace.LeaseKey(ns1, k1, x1), keyspace.LeaseKey(ns2, k2, x2)
		if same := ns1 == ns2 && k1 == k2 && x1 == x2; (l1 == l2) != same {
			t.Fatalf("LeaseKey(%q, %q, %q) = %q and LeaseKey(%q, %q, %q) = %q", ns1, k1, x1, l1, ns2, k2, x2, l2)
		}
	})
}

func TestSchedulerSlotWraps(t *testing.T) {
	for n, want := range map[int64]string{0: "slot/0", 1: "slot/1", 2: "slot/2", 3: "slot/0", -1: "slot/2", -3: "slot/0"} {
		if got := keyspace.SchedulerSlot(n); got != want {
			t.Errorf("SchedulerSlot(%d) = %q, want %q", n, got, want)
		}
	}
}

// HashTag returns the part of a Valkey key that decides its hash slot, by
// the server's rule: the bytes between the first '{' and the first '}'
// after it, if that is not empty; otherwise the whole key.
func HashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}
