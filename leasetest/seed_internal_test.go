package leasetest

import (
	"go/format"
	"os"
	"strings"
	"testing"
)

// seedText is the core shape of the API exactly as the project's
// specification gives it to users, who paste it.
const seedText = `handle, err := client.Acquire(ctx, key, policy)
if err != nil { return err }
managed, err := handle.StartManaged(ctx)
if err != nil { return err }
defer managed.Stop(context.WithoutCancel(ctx))
defer handle.Release(context.WithoutCancel(ctx))
if err := protectedWrite(ctx, handle.Token()); err != nil { return err }
`

// TestSeedShapeIsVerbatim checks that seedShape, which the conformance
// case Managed/SeedShape runs against every backend, holds the seed text
// token for token: gofmt of the text is the body between the markers.
func TestSeedShapeIsVerbatim(t *testing.T) {
	src := "package p\n\nfunc f() error {\n" + seedText + "return nil\n}\n"
	formatted, err := format.Source([]byte(src))
	if err != nil {
		t.Fatalf("the seed text does not parse: %v", err)
	}
	body := string(formatted)
	body = body[strings.Index(body, "{\n")+2 : strings.LastIndex(body, "\treturn nil\n")]

	file, err := os.ReadFile("managed.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(file)
	begin, end := strings.Index(s, "// seed:begin\n"), strings.Index(s, "\t// seed:end")
	if begin < 0 || end < begin {
		t.Fatal("managed.go lost its seed:begin/seed:end markers")
	}
	if got := s[begin+len("// seed:begin\n") : end]; got != body {
		t.Fatalf("seedShape's body differs from the seed text.\ngot:\n%s\nwant (gofmt of the seed text):\n%s", got, body)
	}
}
