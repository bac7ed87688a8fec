package docstest

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var marker = regexp.MustCompile(`^<!-- code: ([^#\s]+)#(\S+) -->$`)

func TestDocsShowCompiledCode(t *testing.T) {
	root := filepath.Join("..", "..")
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	docs = append(docs, filepath.Join(root, "README.md"))
	checked := 0
	for _, doc := range docs {
		blocks, err := markedBlocks(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			want, err := region(filepath.Join(root, b.file), b.region)
			if err != nil {
				t.Errorf("%s:%d: %v", doc, b.line, err)
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

type block struct {
	file, region, code string
	line               int
}

func markedBlocks(path string) ([]block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out  []block
		cur  *block
		in   bool
		body []string
		n    int
	)
	s := bufio.NewScanner(f)
	for s.Scan() {
		n++
		line := s.Text()
		switch {
		case in && strings.HasPrefix(line, "```"):
			cur.code = strings.Join(body, "\n")
			out = append(out, *cur)
			cur, in, body = nil, false, nil
		case in:
			body = append(body, line)
		case cur != nil && strings.HasPrefix(line, "```go"):
			in = true
		case cur != nil:
			cur = nil // a marker not followed by a Go block
		default:
			if m := marker.FindStringSubmatch(line); m != nil {
				cur = &block{file: m[1], region: m[2], line: n}
			}
		}
	}
	return out, s.Err()
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
