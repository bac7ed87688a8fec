package observe_test

import (
	"bytes"
	"errors"
	"go/build"
	"log/slog"
	"strings"
	"testing"

	"github.com/golib/lease/internal/observe"
)

type event string

type observer interface{ Observe(event) }

type recorder struct{ got *[]string }

func (r recorder) Observe(e event) { *r.got = append(*r.got, string(e)) }

func TestMultiSkipsNilAndKeepsOrder(t *testing.T) {
	var got []string
	var none observer
	m := observe.NewMulti[event, observer](recorder{&got}, none, recorder{&got})
	m.Observe("a")
	if strings.Join(got, ",") != "a,a" || len(m) != 2 {
		t.Fatalf("got %v from %d observers, want a,a from 2", got, len(m))
	}
	observe.NewMulti[event, observer]().Observe("nobody") // no panic
}

func TestNopValuesAreEqual(t *testing.T) {
	var a, b observer = observe.Nop[event]{}, observe.Nop[event]{}
	if a != b {
		t.Fatal("two Nop observers differ; packages could not recognise theirs")
	}
}

func TestSlogObserver(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	built := 0
	line := func(e event) observe.Line {
		level := slog.LevelWarn
		var err error
		if e == "filtered" {
			level = slog.LevelDebug
		} else {
			err = errors.New("boom")
		}
		return observe.Line{Level: level, Msg: string(e), Err: err, Attrs: func() []slog.Attr {
			built++
			return []slog.Attr{slog.String("key", "k")}
		}}
	}
	o := observe.NewSlogObserver(logger, line)
	o.Observe("filtered")
	if built != 0 || buf.Len() != 0 {
		t.Fatalf("a filtered event built %d attribute lists and wrote %q", built, buf.String())
	}
	o.Observe("written")
	if out := buf.String(); !strings.Contains(out, "msg=written") || !strings.Contains(out, "key=k") || !strings.Contains(out, "error=boom") {
		t.Fatalf("line %q lacks the message, the attributes or the error", out)
	}
	observe.NewSlogObserver(nil, func(event) observe.Line {
		return observe.Line{Level: slog.LevelError, Attrs: func() []slog.Attr {
			t.Fatal("a nil logger built attributes")
			return nil
		}}
	}).Observe("discarded")
}

// TestImportsOnlyTheStandardLibrary: package lease, which promises to
// depend on the standard library only, imports this package.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	pkg, err := build.Default.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("imports %s, which is not in the standard library", imp)
		}
	}
}
