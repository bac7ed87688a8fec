package chaos_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/golib/lease/internal/chaos"
	"github.com/golib/lease/internal/testserver"
)

func TestMain(m *testing.M) {
	if chaos.IsChild() {
		os.Exit(chaos.RunChild())
	}
	code := testserver.Main(m)
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakOptions ignore the harness's process spawner, which lives as long as
// the test binary by design.
var leakOptions = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/golib/lease/internal/testserver.spawn.func1.1"),
}
