package pgplumbing_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/golib/lease/internal/pgplumbing"
)

func TestCheckIdent(t *testing.T) {
	valid := map[string]bool{
		"leases":       true,
		`we"ird. name`: true,
		"":             false,
		"bad\xff":      false,
		"nul\x00":      false,
		strings.Repeat("a", pgplumbing.MaxIdentLen):   true,
		strings.Repeat("a", pgplumbing.MaxIdentLen+1): false,
	}
	for name, want := range valid {
		if err := pgplumbing.CheckIdent(name); (err == nil) != want {
			t.Errorf("CheckIdent(%q) = %v, want valid %v", name, err, want)
		}
	}
}

// FuzzCheckIdent: every name CheckIdent accepts quotes to one identifier
// that reads back as the name, and every name it refuses breaks a rule.
func FuzzCheckIdent(f *testing.F) {
	for _, s := range []string{"leases", `a"b`, "a.b", "", "\x00", "\xff", strings.Repeat("é", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := pgplumbing.CheckIdent(name)
		valid := name != "" && len(name) <= pgplumbing.MaxIdentLen && utf8.ValidString(name) && !strings.ContainsRune(name, 0)
		if (err == nil) != valid {
			t.Fatalf("CheckIdent(%q) = %v, want valid %v", name, err, valid)
		}
		if err != nil {
			return
		}
		q := pgplumbing.Quote(name)
		inner, ok := strings.CutPrefix(q, `"`)
		inner, ok2 := strings.CutSuffix(inner, `"`)
		if !ok || !ok2 || strings.ReplaceAll(inner, `""`, `"`) != name || strings.Count(strings.ReplaceAll(inner, `""`, ""), `"`) != 0 {
			t.Fatalf("Quote(%q) = %s, not one identifier reading %q", name, q, name)
		}
	})
}
