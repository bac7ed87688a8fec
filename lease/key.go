package lease

import (
	"fmt"
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
// allowed: backends must treat the key as opaque data. The error wraps
// ErrInvalidKey and names the rule broken.
func ValidateKey(key string) error {
	if err := validateName("key", key, MaxKeyLen); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	return nil
}

// ValidateOwner reports whether owner can name a lease holder, under the
// same rules as ValidateKey but at most MaxOwnerLen bytes. The error wraps
// ErrInvalidOwner.
func ValidateOwner(owner string) error {
	if err := validateName("owner", owner, MaxOwnerLen); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOwner, err)
	}
	return nil
}

func validateName(what, s string, maxLen int) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > maxLen {
		return fmt.Errorf("%s is %d bytes, longer than the limit of %d", what, len(s), maxLen)
	}
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			return fmt.Errorf("%s %.40q has invalid UTF-8 at byte %d", what, s, i)
		case unicode.IsControl(r):
			return fmt.Errorf("%s %.40q has control character %U at byte %d", what, s, r, i)
		}
	}
	return nil
}
