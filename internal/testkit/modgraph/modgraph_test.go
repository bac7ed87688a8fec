package modgraph_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// forbidden are module paths that must not appear in the module graph of
// a program importing this module: what only tests, benchmarks and tools
// need.
var forbidden = []string{
	"github.com/Shopify/toxiproxy",
	"github.com/Shopify/toxiproxy/v2",
	"github.com/rs/zerolog",
	"github.com/gorilla/mux",
	"github.com/anishathalye/porcupine",
	"github.com/pressly/goose/v3",
	"github.com/golang-migrate/migrate/v4",
	"github.com/prometheus/prometheus", // obscheck's rule engine
}

// prometheus is allowed from minPrometheus on: older clients pull in
// golang/protobuf and an old x/sys.
const (
	prometheus    = "github.com/prometheus/client_golang"
	minPrometheus = "v1.20.0"
)

// TestConsumerModuleGraph writes a fresh module that imports every
// importable package of this module (with a replace to this checkout),
// lets the go command resolve it as a user's build would (GOFLAGS=-mod=mod,
// GOPROXY and the module cache from the environment), and checks its
// module graph.
func TestConsumerModuleGraph(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	pkgs := productPackages(t, root)
	if len(pkgs) < 10 {
		t.Fatalf("only %d product packages found: %v", len(pkgs), pkgs)
	}

	dir := t.TempDir()
	var main strings.Builder
	main.WriteString("// Command consumer imports every package of github.com/golib/lease.\npackage main\n\nimport (\n")
	for _, p := range pkgs {
		fmt.Fprintf(&main, "\t_ %q\n", p)
	}
	main.WriteString(")\n\nfunc main() {}\n")
	write(t, filepath.Join(dir, "main.go"), main.String())
	write(t, filepath.Join(dir, "go.mod"), "module example.com/consumer\n\ngo 1.26\n\n"+
		"require github.com/golib/lease v0.0.0\n\n"+
		"replace github.com/golib/lease => "+strconv.Quote(root)+"\n")
	// The product's checksums, so that resolving needs no checksum
	// database; the go command still verifies every module against them.
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "go.sum"), string(sum))

	goCmd(t, dir, "mod", "tidy")
	goCmd(t, dir, "build", "./...")
	graph := goCmd(t, dir, "mod", "graph")

	nodes := map[string]bool{}
	for line := range strings.SplitSeq(strings.TrimSpace(graph), "\n") {
		for f := range strings.FieldsSeq(line) {
			nodes[f] = true
		}
	}
	if len(nodes) < 5 {
		t.Fatalf("the module graph has %d modules; the check proves nothing:\n%s", len(nodes), graph)
	}
	for node := range nodes {
		path, version, _ := strings.Cut(node, "@")
		for _, f := range forbidden {
			if path == f {
				t.Errorf("a program importing github.com/golib/lease gets %s in its module graph", node)
			}
		}
		if path == prometheus && olderThan(version, minPrometheus) {
			t.Errorf("a program importing github.com/golib/lease gets %s, older than %s", node, minPrometheus)
		}
	}
	t.Logf("%d packages imported, %d modules in the graph", len(pkgs), len(nodes))
}

// productPackages lists the packages a user may import: every non-main
// package of the module outside internal/ and examples/.
func productPackages(t *testing.T, root string) []string {
	out := goCmd(t, root, "list", "-f", "{{if ne .Name \"main\"}}{{.ImportPath}}{{end}}", "./...")
	var pkgs []string
	for p := range strings.FieldsSeq(out) {
		if strings.Contains(p, "/internal/") || strings.Contains(p, "/examples/") {
			continue
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// olderThan reports whether the semantic version v is older than min,
// comparing major, minor and patch; a version it cannot read counts as
// older.
func olderThan(v, min string) bool {
	a, okA := parse(v)
	b, _ := parse(min)
	if !okA {
		return true
	}
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func parse(v string) ([3]int, bool) {
	var n [3]int
	v, _, _ = strings.Cut(strings.TrimPrefix(v, "v"), "-")
	v, _, _ = strings.Cut(v, "+")
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return n, false
	}
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil {
			return n, false
		}
		n[i] = x
	}
	return n, true
}

func TestOlderThan(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"v1.13.0", true}, {"v1.19.9", true}, {"v1.20.0", false}, {"v1.22.0", false},
		{"v2.0.0", false}, {"v1.20.0-rc.1", false}, {"v0.9.3", true}, {"", true},
	} {
		if got := olderThan(c.v, minPrometheus); got != c.want {
			t.Errorf("olderThan(%q, %s) = %v, want %v", c.v, minPrometheus, got, c.want)
		}
	}
}
