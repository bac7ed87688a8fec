package valkeyplumbing_test

import (
	"os"
	"testing"

	"github.com/golib/lease/internal/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }
