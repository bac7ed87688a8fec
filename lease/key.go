package lease

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Length limits, in bytes.
const (
	// MaxKeyLen is the longest key ValidateKey accepts.
	MaxKeyLen = 1024
	// MaxOwnerLen is the longest owner ValidateOwner accepts.
	MaxOwnerLen = 256
)

// ValidateKey reports whether key can name a lease: it must be non-empty,
// at most MaxKeyLen bytes of valid UTF-8, and contain no control characters
// (which includes NUL, newlines and tabs) and no Unicode replacement
// character. Any other character, including spaces, braces and quotes, is
// allowed: backends must treat the key as opaque data. The error matches
// ErrInvalidKey and names the rule broken, for example
// lease: invalid key "a\nb": control character U+000A at byte 1.
func ValidateKey(key string) error {
	return validateName(ErrInvalidKey, key, MaxKeyLen)
}

// ValidateOwner reports whether owner can name a lease holder, under the
// same rules as ValidateKey but at most MaxOwnerLen bytes. The error
// matches ErrInvalidOwner.
func ValidateOwner(owner string) error {
	return validateName(ErrInvalidOwner, owner, MaxOwnerLen)
}

func validateName(kind error, s string, maxLen int) error {
	bad := func(format string, args ...any) error {
		return &nameError{kind: kind, msg: fmt.Sprintf(format, args...)}
	}
	if s == "" {
		return bad("empty")
	}
	if len(s) > maxLen {
		return bad("%d bytes, longer than the limit of %d", len(s), maxLen)
	}
	ascii := true // printable ASCII needs no decoding: the common case
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' {
			ascii = false
			break
		}
	}
	if ascii {
		return nil
	}
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			return bad("%.40q: invalid UTF-8 at byte %d", s, i)
		case unicode.IsControl(r):
			return bad("%.40q: control character %U at byte %d", s, r, i)
		}
	}
	return nil
}

// nameError is the error of ValidateKey and ValidateOwner: it matches kind
// (ErrInvalidKey or ErrInvalidOwner) and reads
// "lease: invalid key: empty".
type nameError struct {
	kind error
	msg  string
}

func (e *nameError) Error() string        { return e.kind.Error() + e.text() }
func (e *nameError) detail() string       { return detail(e.kind) + e.text() }
func (e *nameError) Is(target error) bool { return target == e.kind }

// text is the message after the kind: the quoted name follows it as its
// subject (invalid key "a\nb": …); a rule without the name after a colon.
func (e *nameError) text() string {
	if strings.HasPrefix(e.msg, `"`) {
		return " " + e.msg
	}
	return ": " + e.msg
}
