package lease_test

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/golib/lease/lease"
)

func TestValidateKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want string // "" for valid
	}{
		{"billing/nightly", ""},
		{"{braces}", ""},
		{"with space", ""},
		{"ünïcödé ✓ 鍵", ""},
		{`quo'te"d`, ""},
		{strings.Repeat("k", lease.MaxKeyLen), ""},
		{"", "lease: invalid key: empty"},
		{strings.Repeat("k", lease.MaxKeyLen+1), "longer than the limit of 1024"},
		{"nul\x00", "control character U+0000"},
		{"new\nline", `lease: invalid key "new\nline": control character U+000A at byte 3`},
		{"del\x7f", "control character U+007F"},
		{"c1\u0085", "control character U+0085"},
		{"bad\xffutf8", "invalid UTF-8 at byte 3"},
	} {
		err := lease.ValidateKey(tc.key)
		if tc.want == "" {
			if err != nil {
				t.Errorf("ValidateKey(%q) = %v, want nil", tc.key, err)
			}
			continue
		}
		if !errors.Is(err, lease.ErrInvalidKey) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey saying %q", tc.key, err, tc.want)
		}
	}
}

func TestValidateOwner(t *testing.T) {
	if err := lease.ValidateOwner("billing-worker/host-1"); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"", strings.Repeat("o", lease.MaxOwnerLen+1), "tab\t"} {
		if err := lease.ValidateOwner(o); !errors.Is(err, lease.ErrInvalidOwner) {
			t.Errorf("ValidateOwner(%q) = %v, want ErrInvalidOwner", o, err)
		}
	}
}

// FuzzValidateKey checks that ValidateKey and ValidateOwner never panic and
// accept exactly the strings that follow their documented rules.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"a", "", "{x}", "\x00", "ü", "\xff", strings.Repeat("z", 1025)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := lease.ValidateKey(key)
		chars := utf8.ValidString(key) &&
			!strings.ContainsFunc(key, func(r rune) bool { return unicode.IsControl(r) || r == utf8.RuneError })
		valid := key != "" && len(key) <= lease.MaxKeyLen && chars
		if valid != (err == nil) {
			t.Fatalf("ValidateKey(%q) = %v, but the rules say valid=%v", key, err, valid)
		}
		if err != nil && !errors.Is(err, lease.ErrInvalidKey) {
			t.Fatalf("ValidateKey(%q) = %v, which does not wrap ErrInvalidKey", key, err)
		}
		err = lease.ValidateOwner(key)
		valid = key != "" && len(key) <= lease.MaxOwnerLen && chars
		if valid != (err == nil) {
			t.Fatalf("ValidateOwner(%q) = %v, but the rules say valid=%v", key, err, valid)
		}
		if err != nil && !errors.Is(err, lease.ErrInvalidOwner) {
			t.Fatalf("ValidateOwner(%q) = %v, which does not wrap ErrInvalidOwner", key, err)
		}
	})
}
