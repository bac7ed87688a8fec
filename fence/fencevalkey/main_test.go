package fencevalkey_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newValkey returns a valkey-go client for the servers at addrs, closed
// when t ends.
func newValkey(t testing.TB, addrs ...string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey.NewClient(%v): %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

func standalone(t testing.TB) valkey.Client {
	t.Helper()
	return newValkey(t, testserver.Valkey(t).Addr())
}

func cluster(t testing.TB) valkey.Client {
	t.Helper()
	return newValkey(t, testserver.ValkeyCluster(t).Addrs()...)
}

var prefixes atomic.Int64

// newFence returns a Valkey fence on c with a prefix of its own.
func newFence(t testing.TB, c valkey.Client) *fencevalkey.Fence {
	t.Helper()
	v, err := fencevalkey.New(c, fencevalkey.Options{Prefix: fmt.Sprintf("t%d-%d:", time.Now().UnixNano()%1e6, prefixes.Add(1))})
	if err != nil {
		t.Fatalf("NewValkey: %v", err)
	}
	return v
}

// dataKey returns a data key named name in the hash slot of resource,
// under v's own prefix, so that a test run twice in one process (go test
// -count=2) on the shared server starts from keys that do not exist yet.
func dataKey(v *fencevalkey.Fence, name, resource string) string {
	tag := "{" + resource + "}"
	return strings.TrimSuffix(v.FenceKey(resource), tag) + name + ":" + tag
}

// snap returns a snapshot of lease key with token.
func snap(key string, token lease.Token) lease.Snapshot {
	return lease.Snapshot{Key: key, Owner: "owner-of-" + token.String(), Token: token}
}

func contextWithCancel(t testing.TB) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx, cancel
}

// walk sweeps s to the end of its walk, limit records a page, and
// returns what it removed.
func walk(t *testing.T, s lease.Sweeper, limit int, dry bool) []string {
	t.Helper()
	var removed []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("the walk does not end")
		}
		page, err := s.Sweep(t.Context(), lease.SweepOptions{Cursor: cursor, Limit: limit, DryRun: dry})
		if err != nil {
			t.Fatalf("Sweep(cursor %q): %v", cursor, err)
		}
		removed = append(removed, page.Removed...)
		if page.Next == "" {
			return removed
		}
		cursor = page.Next
	}
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
