package docstest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOneShutdownOrder checks that every guide and example states one
// order for ending a managed lease: stop renewing, then release or hand
// off. Deferred calls run last-in first-out, so a Release (or HandOff)
// deferred after a Stop in the same function would run first; no prose
// may say "release first" or "hand off first"; and in the guides' Go
// blocks and the examples, a HandOff call comes a few lines after a Stop
// in the same function (a hand-off ends the acquisition as a release does, so the
// renewer must have stopped before it).
func TestOneShutdownOrder(t *testing.T) {
	var files []string
	for _, glob := range []string{"README.md", "docs/*.md", "examples/*/*.go", "lease/*_test.go", "internal/testkit/docstest/*.go"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	deferStop := regexp.MustCompile(`defer \w+\.Stop\(`)
	deferRelease := regexp.MustCompile(`defer \w+\.(Release|HandOff)\(`)
	releaseFirst := regexp.MustCompile(`(?i)release (it )?first|hand (it )?off first|runs first: free`)
	stop := regexp.MustCompile(`\w\.Stop\(`)
	handOff := regexp.MustCompile(`^[^/]*\b\w+\.HandOff\(`)
	checked, handOffs := 0, 0
	for _, f := range files {
		if strings.HasSuffix(f, "order_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		// A guide's Go code (a block of a page, or an example's file),
		// where a HandOff must follow a Stop; the lease package's tests
		// hand off with a running renewer on purpose.
		slash := filepath.ToSlash(f)
		guide := !strings.Contains(slash, "/lease/") && !strings.Contains(slash, "/docstest/")
		code := strings.HasSuffix(f, ".go") // in Go code: a .go file, or a ```go block
		stopAt := -1
		stopped := -1 // the line of the last Stop call in this function or block
		for i, l := range lines {
			rel, _ := filepath.Rel(root, f)
			if releaseFirst.MatchString(l) {
				t.Errorf("%s:%d says to release before stopping the renewer: %q", rel, i+1, strings.TrimSpace(l))
			}
			if strings.HasSuffix(f, ".md") && strings.HasPrefix(strings.TrimSpace(l), "```") {
				code = strings.HasPrefix(strings.TrimSpace(l), "```go")
			}
			switch {
			case deferStop.MatchString(l):
				stopAt = i
			case deferRelease.MatchString(l):
				if stopAt >= 0 && i-stopAt < 12 {
					t.Errorf("%s:%d defers %s after the Stop on line %d, so it runs first", rel, i+1, deferRelease.FindStringSubmatch(l)[1], stopAt+1)
				}
				checked++
				stopAt = -1
			}
			switch {
			case code && stop.MatchString(l):
				stopped = i
			case code && guide && handOff.MatchString(l) && !strings.HasPrefix(strings.TrimSpace(l), "func "):
				if stopped < 0 || i-stopped > 8 {
					t.Errorf("%s:%d hands off with no Stop of the renewer in the 8 lines before it: stop renewing, then hand off", rel, i+1)
				}
				handOffs++
			}
			if strings.HasPrefix(l, "}") || strings.HasPrefix(l, "```") {
				stopAt = -1
			}
			// A function's end in a file; a block's end in a page, whose
			// blocks are function bodies with "}" at the margin.
			if strings.HasPrefix(l, "```") || strings.HasPrefix(l, "}") && strings.HasSuffix(f, ".go") {
				stopped = -1
			}
		}
	}
	if checked < 5 {
		t.Fatalf("found %d deferred releases in the guides and examples, want at least 5: has the layout changed?", checked)
	}
	if handOffs < 2 {
		t.Fatalf("found %d hand-offs in the guides and examples, want at least 2: has the layout changed?", handOffs)
	}
}
