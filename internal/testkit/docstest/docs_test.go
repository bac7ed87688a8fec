package docstest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsShowCompiledCode checks every block marked with the region of a
// file against that region.
func TestDocsShowCompiledCode(t *testing.T) {
	checked := 0
	for _, doc := range docs(t) {
		blocks, err := goBlocks(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if b.kind != code {
				continue
			}
			want, err := region(filepath.Join(root, b.file), b.region)
			if err != nil {
				t.Errorf("%s:%d: %s#%s: %v", doc, b.line, b.file, b.region, err)
				continue
			}
			if trimBlank(b.code) != trimBlank(want) {
				t.Errorf("%s:%d: the code block differs from %s#%s; copy the region again.\n--- doc:\n%s\n--- file:\n%s",
					doc, b.line, b.file, b.region, b.code, want)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no marked code blocks found; the check proves nothing")
	}
	t.Logf("%d code blocks match their compiled sources", checked)
}

// TestFragmentsAppearInTheirFiles checks that the lines of every block
// marked as a fragment of a file appear in it, in order and one after
// another (indentation aside).
func TestFragmentsAppearInTheirFiles(t *testing.T) {
	for _, doc := range docs(t) {
		blocks, err := goBlocks(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if b.kind != fragment {
				continue
			}
			data, err := os.ReadFile(filepath.Join(root, b.file))
			if err != nil {
				t.Errorf("%s:%d: %v", doc, b.line, err)
				continue
			}
			if !containsLines(string(data), b.code) {
				t.Errorf("%s:%d: the fragment is not in %s:\n%s", doc, b.line, b.file, b.code)
			}
		}
	}
}

// TestEveryGoBlockIsChecked: every ```go block of README.md and docs/ is a
// complete file that compiles, or names the complete file it is part of,
// and then the page links that file (or its directory) for the reader.
func TestEveryGoBlockIsChecked(t *testing.T) {
	var wholes []string
	for _, doc := range docs(t) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := goBlocks(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if b.kind == whole {
				if !strings.HasPrefix(strings.TrimSpace(b.code), "package ") && !strings.Contains(b.code, "\npackage ") {
					t.Errorf("%s:%d: a Go block that is neither a complete file nor marked as part of one "+
						"(<!-- code: FILE#REGION -->, <!-- fragment: FILE --> or <!-- program: FILE --> on the line before):\n%s",
						doc, b.line, b.code)
					continue
				}
				wholes = append(wholes, b.code)
				continue
			}
			if !links(doc, string(text), b.file) {
				t.Errorf("%s:%d: the block is part of %s, which the page does not link", doc, b.line, b.file)
			}
		}
	}
	// Each complete file is built as the main package of a module of its
	// own, as a reader would.
	for i, src := range wholes {
		buildModule(t, map[string]string{"main.go": src})
		t.Logf("complete block %d builds", i+1)
	}
}

// containsLines reports whether the lines of frag, with their leading
// white space removed, appear one after another in text.
func containsLines(text, frag string) bool {
	trim := func(s string) []string {
		lines := strings.Split(strings.TrimSpace(s), "\n")
		for i, l := range lines {
			lines[i] = strings.TrimSpace(l)
		}
		return lines
	}
	t, f := trim(text), trim(frag)
	for i := 0; i+len(f) <= len(t); i++ {
		match := true
		for j := range f {
			if t[i+j] != f[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func region(path, name string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	lines := strings.Split(string(data), "\n")
	begin, end := -1, -1
	for i, l := range lines {
		switch strings.TrimSpace(l) {
		case "// docs:begin " + name:
			begin = i + 1
		case "// docs:end " + name:
			end = i
		}
	}
	if begin < 0 || end < begin {
		return "", os.ErrNotExist
	}
	lines = lines[begin:end]
	indent, first := "", true
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		p := l[:len(l)-len(strings.TrimLeft(l, "\t"))]
		if first || len(p) < len(indent) {
			indent, first = p, false
		}
	}
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, indent)
	}
	return strings.Join(lines, "\n"), nil
}

// trimBlank drops trailing blank lines, which gofmt sometimes forces before a
// closing marker comment.
func trimBlank(s string) string { return strings.TrimRight(s, "\n\t ") }
