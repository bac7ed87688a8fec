package pgmigrate_test

import (
	"io/fs"
	"reflect"
	"testing"
	"testing/fstest"

	"github.com/golib/lease/internal/pgmigrate"
)

func TestLoad(t *testing.T) {
	fsys := fstest.MapFS{
		"010_ten.up.sql":   {Data: []byte("SELECT 10")},
		"002_two.up.sql":   {Data: []byte("SELECT 2")},
		"002_two.down.sql": {Data: []byte("SELECT -2")},
		"README.md":        {Data: []byte("not a migration")},
		"sub/001.up.sql":   {Data: []byte("not at the root")},
	}
	ms, err := pgmigrate.Load(fsys)
	if err != nil {
		t.Fatal(err)
	}
	want := []pgmigrate.Migration{
		{Version: 2, Name: "002_two", SQL: "SELECT 2"},
		{Version: 10, Name: "010_ten", SQL: "SELECT 10"},
	}
	if !reflect.DeepEqual(ms, want) {
		t.Fatalf("Load = %+v; want %+v", ms, want)
	}
}

func TestLoadRejectsUnnumbered(t *testing.T) {
	for _, name := range []string{"lease.up.sql", "x_lease.up.sql", "000_zero.up.sql", "-1_neg.up.sql", "001.up.sql"} {
		_, err := pgmigrate.Load(fstest.MapFS{name: {Data: []byte("SELECT 1")}})
		if err == nil {
			t.Errorf("Load(%s) succeeded; want an error", name)
		}
	}
}

func TestLoadEmpty(t *testing.T) {
	if ms, err := pgmigrate.Load(fstest.MapFS{}); err != nil || len(ms) != 0 {
		t.Fatalf("Load(empty) = %v, %v; want nothing", ms, err)
	}
}

func TestGoose(t *testing.T) {
	fsys := fstest.MapFS{
		"001_one.up.sql":   {Data: []byte("CREATE TABLE one ();\n")},
		"001_one.down.sql": {Data: []byte("DROP TABLE one;\n")},
		"002_two.up.sql":   {Data: []byte("CREATE TABLE two ();\n")},
		"002_two.down.sql": {Data: []byte("DROP TABLE two;\n")},
		"README.md":        {Data: []byte("not a migration")},
	}
	g, err := pgmigrate.Goose(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(g, "001_one.sql", "002_two.sql"); err != nil {
		t.Fatal(err)
	}
	entries, err := fs.ReadDir(g, ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("Goose has %d files, want 2 (one per version): %v", len(entries), entries)
	}
	b, err := fs.ReadFile(g, "002_two.sql")
	if err != nil {
		t.Fatal(err)
	}
	if want := "-- +goose Up\nCREATE TABLE two ();\n\n-- +goose Down\nDROP TABLE two;\n"; string(b) != want {
		t.Fatalf("002_two.sql = %q, want %q", b, want)
	}
}

func TestGooseRejectsUnpaired(t *testing.T) {
	for _, name := range []string{"001_one.up.sql", "001_one.down.sql"} {
		if _, err := pgmigrate.Goose(fstest.MapFS{name: {Data: []byte("SELECT 1;")}}); err == nil {
			t.Errorf("Goose with only %s succeeded; want an error", name)
		}
	}
}
