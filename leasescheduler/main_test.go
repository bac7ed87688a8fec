package leasescheduler_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/golib/lease/internal/testserver"
)

// TestMain runs the tests through testserver.Main, which stops the shared
// Valkey and PostgreSQL servers afterwards, then checks that no goroutine
// (a renewer, a release watcher, a connection, a scheduler) was left
// running.
func TestMain(m *testing.M) {
	code := testserver.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
