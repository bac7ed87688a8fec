package docstest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pendingInternal lists the examples still allowed to import internal/
// packages, each with the reason. The test fails once one no longer does,
// so that its entry is removed.
var pendingInternal = map[string]string{
	"github.com/golib/lease/examples/scheduler": "issue 14: its gocron wiring is being rewritten",
}

// TestExamplesAreCopyable: no example program imports a package of
// internal/ (its tests may, for the test servers), and no page of docs/
// sends the reader to one.
func TestExamplesAreCopyable(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./examples/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./examples/...: %v", err)
	}
	n := 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		n++
		var internal []string
		for _, imp := range imports {
			if strings.HasPrefix(imp, "github.com/golib/lease/internal/") {
				internal = append(internal, imp)
			}
		}
		_, pending := pendingInternal[pkg]
		switch {
		case len(internal) > 0 && !pending:
			t.Errorf("%s imports %s; an example must not need internal packages", pkg, strings.Join(internal, ", "))
		case len(internal) == 0 && pending:
			t.Errorf("%s imports no internal package any more: remove it from pendingInternal", pkg)
		}
	}
	if n < 5 {
		t.Fatalf("go list found %d examples; the check proves nothing", n)
	}
	for _, doc := range docs(t) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(doc) == "scheduling.md" && pendingInternal["github.com/golib/lease/examples/scheduler"] != "" {
			continue
		}
		if strings.Contains(string(text), "exampleenv") {
			t.Errorf("%s mentions internal/exampleenv, which readers cannot import", doc)
		}
	}
}
