package leasequeue_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/golib/lease/internal/testserver"
)

// TestMain runs the tests through testserver.Main, which stops the shared
// Valkey and PostgreSQL servers afterwards, then checks that no goroutine
// (a renewer, a worker loop, a partition handler, a connection) was left
// running.
func TestMain(m *testing.M) {
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
// the test binary by design, and valkey-go's cluster client closing
// replaced connections a few seconds after a topology refresh, in a
// goroutine that outlives Client.Close.
var leakOptions = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/golib/lease/internal/testserver.spawn.func1.1"),
	goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"),
}
