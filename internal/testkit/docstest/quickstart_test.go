package docstest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/internal/testkit/testserver"
)

// programs are the programs the quickstarts assemble, with the
// environment of each of two runs: what the page tells the reader to set.
var programs = map[string]func(t *testing.T) [][]string{
	"examples/postgres/main.go": func(t *testing.T) [][]string {
		url := "DATABASE_URL=" + testserver.Postgres(t).NewDatabase(t)
		return [][]string{{url}, {url, "PGBOUNCER=transaction"}}
	},
	"examples/valkey/main.go": func(t *testing.T) [][]string {
		addr := "VALKEY_ADDR=" + testserver.Valkey(t).Addr()
		return [][]string{{addr}, {addr}}
	},
}

// TestQuickstartsRun assembles each page's program as a reader would, by
// copying its program blocks in order into main.go, checks that this is
// the file the page names, builds it in a module of its own and runs it,
// twice, against real servers.
func TestQuickstartsRun(t *testing.T) {
	ran := map[string]bool{}
	for _, doc := range docs(t) {
		blocks, err := goBlocks(doc)
		if err != nil {
			t.Fatal(err)
		}
		parts := map[string][]string{}
		var order []string
		for _, b := range blocks {
			if b.kind != program {
				continue
			}
			if parts[b.file] == nil {
				order = append(order, b.file)
			}
			parts[b.file] = append(parts[b.file], b.code)
		}
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range order {
			src := strings.Join(parts[file], "\n\n") + "\n"
			t.Run(filepath.Base(doc)+"/"+file, func(t *testing.T) {
				want, err := os.ReadFile(filepath.Join(root, file))
				if err != nil {
					t.Fatal(err)
				}
				if src != string(want) {
					t.Errorf("the program blocks of %s, joined by blank lines, differ from %s at line %d; copy the file's parts again",
						doc, file, firstDifference(src, string(want)))
				}
				envs, ok := programs[file]
				if !ok {
					t.Fatalf("%s has the program %s, which this test does not know how to run", doc, file)
				}
				runs := envs(t)
				for _, env := range runs[0] {
					if name, _, _ := strings.Cut(env, "="); !strings.Contains(string(text), name+"=") {
						t.Errorf("%s does not tell the reader to set %s", doc, name)
					}
				}
				bin := buildModule(t, map[string]string{"main.go": src})
				for i, env := range runs {
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					cmd := exec.CommandContext(ctx, bin)
					cmd.Env = append(os.Environ(), env...)
					out, err := cmd.CombinedOutput()
					cancel()
					if err != nil {
						t.Fatalf("run %d of the program of %s: %v\n%s", i+1, doc, err, out)
					}
					if !strings.Contains(string(out), "released; shutting down") {
						t.Fatalf("run %d of the program of %s did not finish its work:\n%s", i+1, doc, out)
					}
					t.Logf("run %d:\n%s", i+1, out)
				}
				ran[file] = true
			})
		}
	}
	for file := range programs {
		if !ran[file] {
			t.Errorf("no page assembles %s", file)
		}
	}
}

// firstDifference returns the first line number at which a and b differ.
func firstDifference(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}
