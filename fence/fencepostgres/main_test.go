package fencepostgres_test

import (
	"os"
	"testing"

	"github.com/golib/lease/internal/testkit/fenceenv"
	"github.com/golib/lease/internal/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// The environment the fence packages share (internal/testkit/fenceenv).
var (
	ctxT      = fenceenv.Ctx
	newPool   = fenceenv.Pool
	snap      = fenceenv.Snap
	wantStale = fenceenv.WantStale
	walk      = fenceenv.Walk
)
