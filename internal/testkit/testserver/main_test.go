package testserver_test

import (
	"os"
	"testing"

	"github.com/golib/lease/internal/testkit/testserver"
)

// TestMain runs the tests through testserver.MainLeakChecked, which checks
// that neither the tests nor the harness left a goroutine running.
func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }
