package fence_test

import (
	"os"
	"sync/atomic"
	"testing"

	"github.com/golib/lease/fence/fencecolumn"
	"github.com/golib/lease/internal/testkit/fenceenv"
	"github.com/golib/lease/internal/testkit/testserver"
)

// col names the fence columns of the tests' own tables.
var col = fencecolumn.Column{Token: "fence_token", Key: "fence_key"}

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// prefixes numbers the names the property and scenario tests make.
var prefixes atomic.Int64

// The environment the fence packages share (internal/testkit/fenceenv).
var (
	ctxT       = fenceenv.Ctx
	newPool    = fenceenv.Pool
	standalone = fenceenv.Standalone
	cluster    = fenceenv.Cluster
	newFence   = fenceenv.Fence
	snap       = fenceenv.Snap
)
