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

// TestRecordKeyIsOneToOne checks, for arbitrary keys (braces, percent
// signs, slashes, permit keys and any Unicode), that the record's hash
// tag is the one HashTag names; that it is the whole escaped key for a
// key without a hash tag that is no permit's, as before tags and permits
// had layouts of their own, and the key's own tag for a key that holds
// one; that the release channel is in the record's slot; and that
// two keys never share a record.
func TestRecordKeyIsOneToOne(t *testing.T) {
	keyGen := rapid.OneOf(
		rapid.StringMatching(`[a{}%7DB2F/ ]{1,12}`), // mostly the troublesome bytes
		rapid.StringMatching(`(a|\{|\}|\{a\}|/permit/|0|7|:){1,6}`),
		rapid.StringN(1, 64, lease.MaxKeyLen),
	).Filter(func(k string) bool { return lease.ValidateKey(k) == nil })
	rapid.Check(t, func(t *rapid.T) {
		prefix := rapid.StringMatching(`[a-z:/ ]{0,8}`).Draw(t, "prefix")
		k1 := keyGen.Draw(t, "k1")
		k2 := keyGen.Draw(t, "k2")
		r1, r2 := recordKey(prefix, k1), recordKey(prefix, k2)
		tag := hashTag(r1)
		if !strings.HasPrefix(r1, prefix+"{"+tag+"}") {
			t.Fatalf("record %q of %q does not start with prefix{tag}", r1, k1)
		}
		s := &Store{prefix: prefix}
		if got := s.HashTag(k1); got != "{"+tag+"}" {
			t.Fatalf("HashTag(%q) = %q, want {%s}", k1, got, tag)
		}
		switch own := hashTag(k1); {
		case own != k1:
			if tag != own {
				t.Fatalf("the record %q of %q is not in the key's own slot, %q", r1, k1, own)
			}
		case !strings.Contains(k1, "/permit/"):
			if r1 != prefix+"{"+tag+"}" || keyUnescaper.Replace(tag) != k1 {
				t.Fatalf("record %q of %q is not prefix{escaped key}", r1, k1)
			}
			if hashTag(k2) == k2 && hashTag(k1+k2) == k1+k2 && !strings.Contains(k1+k2, "/permit/") {
				if t1, t2 := s.HashTag(k1), s.HashTag(k2); s.HashTag(k1+k2) != t1[:len(t1)-1]+t2[1:] {
					t.Fatalf("HashTag of %q+%q is not the two tags joined", k1, k2)
				}
			}
		}
		if hashTag(releaseChannel(r1)) != tag {
			t.Fatalf("release channel of %q is not in the record's slot", k1)
		}
		if (r1 == r2) != (k1 == k2) {
			t.Fatalf("keys %q and %q have records %q and %q", k1, k2, r1, r2)
		}
	})
}
