package leasescheduler_test

import (
	"os"
	"testing"

	"github.com/golib/lease/internal/testkit/testserver"
)

// TestMain runs the tests through testserver.Main, which stops the shared
// Valkey and PostgreSQL servers afterwards, then checks that no goroutine
// (a renewer, a release watcher, a connection, a scheduler) was left
// running.
func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }
