package testserver_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/golib/lease/internal/testserver"
)

// TestMain runs the tests through testserver.Main, then checks that neither
// the tests nor the harness left a goroutine running.
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

// leakOptions ignore valkey-go's cluster client closing replaced connections
// 5s after a topology refresh, in a goroutine that outlives Client.Close.
var leakOptions = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"),
}
