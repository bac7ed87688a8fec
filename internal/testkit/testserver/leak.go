package testserver

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// MainLeakChecked runs the tests of m through [Main] and, if they passed,
// checks with goleak that they left no goroutine running: a renewer, a
// watcher, a client's connection. It returns the exit code, 1 if a goroutine
// was left. A package's TestMain calls it as
//
//	os.Exit(testserver.MainLeakChecked(m))
//
// extra adds the package's own exceptions. Two are always made: valkey-go's
// cluster client closes the connections that a topology refresh replaced
// 5s later, and after a failed dial any valkey-go client waits out its
// reconnect back-off (under a second), each in a goroutine that
// Client.Close does not wait for and that ends on its own. [Main] stops the servers and the goroutine that started
// them, so the harness itself needs no exception.
func MainLeakChecked(m *testing.M, extra ...goleak.Option) int {
	code := Main(m)
	if code != 0 {
		return code
	}
	opts := append([]goleak.Option{
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*call).DelayDo.func1"),
	}, extra...)
	if err := goleak.Find(opts...); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
		return 1
	}
	return 0
}
