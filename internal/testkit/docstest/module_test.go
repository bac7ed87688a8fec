package docstest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// buildModule writes files into a fresh module that requires this
// repository's module (replaced by the checkout), resolves it as a reader's
// go mod tidy would, builds it, and returns the program's path. The
// checkout's go.sum is copied in, so no checksum database is asked; the go
// command still checks every module against it.
func buildModule(t *testing.T, files map[string]string) string {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(abs, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files["go.mod"] = "module example.com/quickstart\n\ngo 1.26\n\nrequire github.com/golib/lease v0.0.0\n\n" +
		"replace github.com/golib/lease => " + strconv.Quote(abs) + "\n"
	files["go.sum"] = string(sum)
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd(t, dir, "mod", "tidy")
	goCmd(t, dir, "vet", ".")
	goCmd(t, dir, "build", "-o", "program", ".")
	return filepath.Join(dir, "program")
}

func goCmd(t *testing.T, dir string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
