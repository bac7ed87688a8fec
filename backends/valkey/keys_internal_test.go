package valkey

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/golib/lease/lease"
)

// hashTag returns the part of a Valkey key that decides its hash slot, by
// the server's rule: the bytes between the first '{' and the first '}'
// after it, if that is not empty; otherwise the whole key.
func hashTag(key string) string {
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

var keyUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}", "%2F", "/")

// TestRecordKeyIsOneToOne checks, for arbitrary keys (braces, percent signs,
// slashes and any Unicode), that the record's hash tag is the whole escaped
// key, that it turns back into the key, and that two keys never share a
// record.
func TestRecordKeyIsOneToOne(t *testing.T) {
	keyGen := rapid.OneOf(
		rapid.StringMatching(`[a{}%7DB2F/ ]{1,12}`), // mostly the troublesome bytes
		rapid.StringN(1, 64, lease.MaxKeyLen),
	).Filter(func(k string) bool { return lease.ValidateKey(k) == nil })
	rapid.Check(t, func(t *rapid.T) {
		prefix := rapid.StringMatching(`[a-z:/ ]{0,8}`).Draw(t, "prefix")
		k1 := keyGen.Draw(t, "k1")
		k2 := keyGen.Draw(t, "k2")
		r1, r2 := recordKey(prefix, k1), recordKey(prefix, k2)
		tag := hashTag(r1)
		if got := r1; got != prefix+"{"+tag+"}" {
			t.Fatalf("record %q of %q is not prefix{tag}", got, k1)
		}
		if back := keyUnescaper.Replace(tag); back != k1 {
			t.Fatalf("tag %q of %q unescapes to %q", tag, k1, back)
		}
		s := &Store{prefix: prefix}
		if got := s.HashTag(k1); got != "{"+tag+"}" {
			t.Fatalf("HashTag(%q) = %q, want {%s}", k1, got, tag)
		}
		if t1, t2 := s.HashTag(k1), s.HashTag(k2); s.HashTag(k1+k2) != t1[:len(t1)-1]+t2[1:] {
			t.Fatalf("HashTag of %q+%q is not the two tags joined", k1, k2)
		}
		if hashTag(releaseChannel(r1)) != tag {
			t.Fatalf("release channel of %q is not in the record's slot", k1)
		}
		if (r1 == r2) != (k1 == k2) {
			t.Fatalf("keys %q and %q have records %q and %q", k1, k2, r1, r2)
		}
	})
}
