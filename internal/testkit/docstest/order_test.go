package docstest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOneShutdownOrder checks that every guide and example states one
// order for ending a managed lease: stop renewing, then release. Deferred
// calls run last-in first-out, so a Release deferred after a Stop in the
// same function would run first; and no prose may say "release first".
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
	deferRelease := regexp.MustCompile(`defer \w+\.Release\(`)
	releaseFirst := regexp.MustCompile(`(?i)release (it )?first|runs first: free`)
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "order_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		stopAt := -1
		for i, l := range lines {
			rel, _ := filepath.Rel(root, f)
			if releaseFirst.MatchString(l) {
				t.Errorf("%s:%d says to release before stopping the renewer: %q", rel, i+1, strings.TrimSpace(l))
			}
			switch {
			case deferStop.MatchString(l):
				stopAt = i
			case deferRelease.MatchString(l):
				if stopAt >= 0 && i-stopAt < 12 {
					t.Errorf("%s:%d defers Release after the Stop on line %d, so Release runs first", rel, i+1, stopAt+1)
				}
				checked++
				stopAt = -1
			}
			if strings.HasPrefix(l, "}") || strings.HasPrefix(l, "```") {
				stopAt = -1
			}
		}
	}
	if checked < 5 {
		t.Fatalf("found %d deferred releases in the guides and examples, want at least 5: has the layout changed?", checked)
	}
}
