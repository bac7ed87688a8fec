package fencevalkey_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/fenceenv"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// The environment the fence packages share (internal/testkit/fenceenv).
var (
	ctxT       = fenceenv.Ctx
	newValkey  = fenceenv.Valkey
	standalone = fenceenv.Standalone
	walk       = fenceenv.Walk
	cluster    = fenceenv.Cluster
	newFence   = fenceenv.Fence
	snap       = fenceenv.Snap
)

// dataKey returns a data key named name in the hash slot of resource,
// under v's own prefix, so that a test run twice in one process (go test
// -count=2) on the shared server starts from keys that do not exist yet.
func dataKey(v *fencevalkey.Fence, name, resource string) string {
	tag := "{" + resource + "}"
	return strings.TrimSuffix(v.FenceKey(resource), tag) + name + ":" + tag
}

func contextWithCancel(t testing.TB) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx, cancel
}

// wantFloor fails t unless err is a refusal by the floor current of a
// write with token.
func wantFloor(t *testing.T, err error, token, current lease.Token) {
	t.Helper()
	var se *fence.StaleError
	if !errors.As(err, &se) || !se.Floor || se.Token != token || se.Current != current {
		t.Fatalf("err = %v; want a refusal of token %d by the floor %d", err, token, current)
	}
}
