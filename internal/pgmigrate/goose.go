package pgmigrate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"
)

// Goose returns the migrations of fsys, which are in golang-migrate's
// layout (NNN_name.up.sql and NNN_name.down.sql at the root), in goose's
// layout: one file NNN_name.sql per version, the up file's text under
// "-- +goose Up" and the down file's under "-- +goose Down". The files are
// built once, in memory, so the up and down files stay the one source of
// the SQL. Every up file needs its down file and the other way round.
//
// goose splits a section into statements at each semicolon that ends a
// line, so the files must not end a line inside a statement with one
// (no function bodies); the tests apply every set with goose.
func Goose(fsys fs.FS) (fs.FS, error) {
	ups, err := fs.Glob(fsys, "*.up.sql")
	if err != nil {
		return nil, err
	}
	downs, err := fs.Glob(fsys, "*.down.sql")
	if err != nil {
		return nil, err
	}
	m := memFS{}
	for _, up := range ups {
		name := strings.TrimSuffix(up, ".up.sql")
		if !slices.Contains(downs, name+".down.sql") {
			return nil, fmt.Errorf("migration %s: no %s.down.sql", up, name)
		}
		u, err := fs.ReadFile(fsys, up)
		if err != nil {
			return nil, err
		}
		d, err := fs.ReadFile(fsys, name+".down.sql")
		if err != nil {
			return nil, err
		}
		m[name+".sql"] = []byte("-- +goose Up\n" + string(u) + "\n-- +goose Down\n" + string(d))
	}
	for _, down := range downs {
		if name := strings.TrimSuffix(down, ".down.sql"); !slices.Contains(ups, name+".up.sql") {
			return nil, fmt.Errorf("migration %s: no %s.up.sql", down, name)
		}
	}
	return m, nil
}

// memFS is a read-only file system of regular files at its root, the
// name of each mapped to its contents.
type memFS map[string][]byte

func (m memFS) Open(name string) (fs.File, error) {
	if name == "." {
		return &memDir{fs: m}, nil
	}
	data, ok := m[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memFile{info: memInfo{name: name, size: int64(len(data))}, r: bytes.NewReader(data)}, nil
}

func (m memFS) ReadFile(name string) ([]byte, error) {
	data, ok := m[name]
	if !ok {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: fs.ErrNotExist}
	}
	return slices.Clone(data), nil
}

func (m memFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if name != "." {
		if _, ok := m[name]; ok {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
		}
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]fs.DirEntry, len(names))
	for i, n := range names {
		out[i] = fs.FileInfoToDirEntry(memInfo{name: n, size: int64(len(m[n]))})
	}
	return out, nil
}

type memFile struct {
	info memInfo
	r    *bytes.Reader
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *memFile) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *memFile) Close() error               { return nil }

// memDir is the open root directory; ReadDir pages through its entries.
type memDir struct {
	fs      memFS
	entries []fs.DirEntry
	read    bool
}

func (d *memDir) Stat() (fs.FileInfo, error) { return memInfo{name: ".", dir: true}, nil }
func (d *memDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: ".", Err: errors.New("is a directory")}
}
func (d *memDir) Close() error { return nil }

func (d *memDir) ReadDir(n int) ([]fs.DirEntry, error) {
	if !d.read {
		d.entries, _ = d.fs.ReadDir(".")
		d.read = true
	}
	if n <= 0 {
		out := d.entries
		d.entries = nil
		return out, nil
	}
	if len(d.entries) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(d.entries))
	out := d.entries[:n]
	d.entries = d.entries[n:]
	return out, nil
}

type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string { return i.name }
func (i memInfo) Size() int64  { return i.size }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
