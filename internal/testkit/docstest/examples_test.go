package docstest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

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
		if len(internal) > 0 {
			t.Errorf("%s imports %s; an example must not need internal packages", pkg, strings.Join(internal, ", "))
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
		if strings.Contains(string(text), "exampleenv") {
			t.Errorf("%s mentions internal/exampleenv, which readers cannot import", doc)
		}
	}
}
