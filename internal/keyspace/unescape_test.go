package keyspace_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/golib/lease/internal/keyspace"
)

// TestUnescapeReversesEscape: Unescape undoes Escape, and accepts nothing
// Escape does not return, so a name read back maps to one thing only.
func TestUnescapeReversesEscape(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := names.Draw(t, "s")
		back, ok := keyspace.Unescape(keyspace.Escape(s))
		if !ok || back != s {
			t.Fatalf("Unescape(Escape(%q)) = %q, %v", s, back, ok)
		}
		e := names.Draw(t, "escaped")
		if u, ok := keyspace.Unescape(e); ok && keyspace.Escape(u) != e {
			t.Fatalf("Unescape(%q) = %q, which Escape turns into %q", e, u, keyspace.Escape(u))
		}
	})
}

func TestUnescapeRefuses(t *testing.T) {
	for _, e := range []string{"a/b", "{", "}", "%", "%2", "%2f", "%41", "%ZZ", "x%7"} {
		if u, ok := keyspace.Unescape(e); ok {
			t.Errorf("Unescape(%q) = %q, true; want false", e, u)
		}
	}
}
