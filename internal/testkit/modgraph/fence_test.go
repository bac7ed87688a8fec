package modgraph_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestFenceLinksOnlyItsStore checks that each fence package links the
// client of its own store and no other: a program that fences PostgreSQL
// transactions gets no valkey-go, one that fences Valkey commands no pgx
// or squirrel, and one that only uses the rule (package fence) no store's
// client at all.
func TestFenceLinksOnlyItsStore(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	const (
		valkeyGo = "github.com/valkey-io/valkey-go"
		pgx      = "github.com/jackc/pgx/v5"
		puddle   = "github.com/jackc/puddle/v2"
		squirrel = "github.com/Masterminds/squirrel"
	)
	for _, c := range []struct {
		pkg       string
		needs     []string
		forbidden []string
	}{
		{"fence", nil, []string{valkeyGo, pgx, puddle, squirrel}},
		{"fence/fencepostgres", []string{pgx}, []string{valkeyGo, squirrel}},
		{"fence/fencecolumn", []string{pgx, squirrel}, []string{valkeyGo}},
		{"fence/fencevalkey", []string{valkeyGo}, []string{pgx, puddle, squirrel}},
	} {
		out := goCmd(t, root, "list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}", "./"+c.pkg)
		linked := map[string]bool{}
		for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
			pkg, mod, _ := strings.Cut(line, " ")
			linked[mod] = true
			for _, f := range c.forbidden {
				if mod == f {
					t.Errorf("%s links %s (module %s)", c.pkg, pkg, mod)
				}
			}
		}
		for _, n := range c.needs {
			if !linked[n] {
				t.Errorf("%s does not link %s; the check proves nothing:\n%s", c.pkg, n, out)
			}
		}
	}
}
