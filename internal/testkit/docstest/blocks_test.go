package docstest

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The markers a Go block of the docs may carry, on the line right before
// its opening fence. A block without one must be a complete Go file.
var (
	// The block is the region "// docs:begin R" ... "// docs:end R" of F.
	codeMarker = regexp.MustCompile(`^<!-- code: ([^#\s]+)#(\S+) -->$`)
	// The block's lines appear, in order and one after another, in F.
	fragmentMarker = regexp.MustCompile(`^<!-- fragment: (\S+) -->$`)
	// The block is the next part of the program F: the program blocks of
	// a page, joined by blank lines, are F, and the page is run.
	programMarker = regexp.MustCompile(`^<!-- program: (\S+) -->$`)
)

type kind int

const (
	whole    kind = iota // no marker: a complete file
	code                 // <!-- code: F#R -->
	fragment             // <!-- fragment: F -->
	program              // <!-- program: F -->
)

// block is one ```go block of a Markdown file.
type block struct {
	kind         kind
	file, region string // what the marker names
	code         string // the block's lines, without the fence's indentation
	line         int    // of the opening fence
}

// goBlocks returns the ```go blocks of the Markdown file path, also those
// indented in a list, in order.
func goBlocks(path string) ([]block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out    []block
		cur    *block
		indent string
		body   []string
		prev   string
		n      int
	)
	s := bufio.NewScanner(f)
	for s.Scan() {
		n++
		line := s.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur != nil && strings.HasPrefix(trimmed, "```"):
			cur.code = strings.Join(body, "\n")
			out = append(out, *cur)
			cur, body = nil, nil
		case cur != nil:
			body = append(body, strings.TrimPrefix(line, indent))
		case strings.HasPrefix(trimmed, "```go"):
			indent = line[:len(line)-len(strings.TrimLeft(line, " \t"))]
			cur = &block{line: n}
			if m := codeMarker.FindStringSubmatch(prev); m != nil {
				cur.kind, cur.file, cur.region = code, m[1], m[2]
			} else if m := fragmentMarker.FindStringSubmatch(prev); m != nil {
				cur.kind, cur.file = fragment, m[1]
			} else if m := programMarker.FindStringSubmatch(prev); m != nil {
				cur.kind, cur.file = program, m[1]
			}
		}
		prev = trimmed
	}
	return out, s.Err()
}

// docs returns README.md and docs/*.md.
func docs(t *testing.T) []string {
	t.Helper()
	ds, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(ds) == 0 {
		t.Fatalf("no docs found: %v", err)
	}
	return append(ds, filepath.Join(root, "README.md"))
}

// root is the repository's root.
var root = filepath.Join("..", "..", "..")

// links reports whether the Markdown text of doc (a file in the
// repository) links to file (a path from the root) or to its directory.
func links(doc, text, file string) bool {
	rel, err := filepath.Rel(filepath.Dir(doc), filepath.Join(root, file))
	if err != nil {
		return false
	}
	rel = filepath.ToSlash(rel)
	dir := filepath.ToSlash(filepath.Dir(rel))
	for _, target := range []string{rel, dir, dir + "/"} {
		for _, end := range []string{")", "#"} {
			if strings.Contains(text, "]("+target+end) {
				return true
			}
		}
	}
	return false
}

func TestGoBlocks(t *testing.T) {
	b, err := goBlocks("testdata/blocks.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []block{
		{kind: whole, code: "package main\n\nfunc main() {}", line: 3},
		{kind: code, file: "a/b.go", region: "r", code: "x := 1", line: 9},
		{kind: fragment, file: "a/c.go", code: "y := 2\nz := 3", line: 14},
		{kind: program, file: "a/main.go", code: "package main", line: 21},
		{kind: whole, code: "w := 4", line: 27},
	}
	if len(b) != len(want) {
		t.Fatalf("goBlocks found %d blocks, want %d: %+v", len(b), len(want), b)
	}
	for i := range want {
		if b[i] != want[i] {
			t.Errorf("block %d = %+v, want %+v", i, b[i], want[i])
		}
	}
}

// TestWholeBlockBuilds builds the complete file of testdata/blocks.md the
// way TestEveryGoBlockIsChecked builds the docs' complete files.
func TestWholeBlockBuilds(t *testing.T) {
	b, err := goBlocks("testdata/blocks.md")
	if err != nil {
		t.Fatal(err)
	}
	if b[0].kind != whole {
		t.Fatalf("the first block of testdata/blocks.md is not a complete file: %+v", b[0])
	}
	if bin := buildModule(t, map[string]string{"main.go": b[0].code}); bin == "" {
		t.Fatal("no program built")
	}
}
