package pgplumbing

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// MaxIdentLen is PostgreSQL's limit on an identifier, in bytes
// (NAMEDATALEN − 1). The server truncates longer names silently, so two
// long names could meet.
const MaxIdentLen = 63

// CheckIdent returns an error if name cannot be one PostgreSQL identifier
// once quoted by [Quote]: it is empty, longer than [MaxIdentLen] bytes, not
// valid UTF-8, or contains a NUL byte. Every other character is safe in a
// quoted identifier. The error starts with the name, for the caller to
// prefix with its package and field.
func CheckIdent(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%q is empty", name)
	case len(name) > MaxIdentLen:
		return fmt.Errorf("%.20q… is %d bytes, longer than the limit of %d", name, len(name), MaxIdentLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%q is not valid UTF-8", name)
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("%q contains a NUL byte", name)
	}
	return nil
}

// Quote returns the parts as one quoted, dot-separated name
// ("schema"."table"), safe to put into SQL text. Check each part with
// [CheckIdent] first.
func Quote(parts ...string) string {
	return pgx.Identifier(parts).Sanitize()
}
