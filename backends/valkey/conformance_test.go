package valkey_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

// retention is the short retention of the conformance suite's Sweeper
// subtests.
const retention = time.Second

func TestConformanceStandalone(t *testing.T) {
	t.Parallel()
	conformance(t, func(t testing.TB) []string { return []string{testserver.Valkey(t).Addr()} })
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	conformance(t, func(t testing.TB) []string { return testserver.ValkeyCluster(t).Addrs() })
}

// conformance runs the suite on the servers at addrs. Each subtest gets a
// Store on a client of its own, named after it, so that Reconnect can
// cut that client's connections (CLIENT KILL) without touching those of
// the subtests running beside it.
func conformance(t *testing.T, addrs func(testing.TB) []string) {
	admin := newClient(t, addrs(t)...)
	short := newStoreWith(t, admin, leasevalkey.Options{Retention: retention})
	var clients sync.Map // *testing.T → its client
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend: func(t *testing.T) lease.Backend {
			name := fmt.Sprintf("conformance-%p", t)
			c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs(t), DisableCache: true, ClientName: name, PipelineMultiplex: singleConnection})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			clients.Store(t, c)
			return newStore(t, c)
		},
		NewRetentionBackend: func(*testing.T) lease.Backend { return short },
		Retention:           retention,
		Reconnect: func(t *testing.T) {
			c, ok := clients.Load(t)
			if !ok {
				t.Fatal("Reconnect: no backend was made for this subtest")
			}
			killClient(t, admin, c.(valkey.Client), fmt.Sprintf("conformance-%p", t))
		},
	})
}

// singleConnection is the ClientOption.PipelineMultiplex of a client whose
// connections killClient cuts: one connection per node, so that once
// killClient sees it replaced, no cut one is left for the next command.
const singleConnection = -1

// killClient ends every connection of c, named name, on every node behind
// admin (CLIENT KILL ID), subscriptions included, and returns once each
// node has a new connection of that name: c saw the cut (PINGs make it
// look) and connected again, so that its next command does not meet the
// dead connection.
func killClient(t *testing.T, admin, c valkey.Client, name string) {
	t.Helper()
	ctx := ctxT(t)
	killed := map[string][]int64{}
	for addr, n := range admin.Nodes() {
		for _, id := range clientIDs(t, n, name) {
			if err := n.Do(ctx, n.B().ClientKill().Id(id).Build()).Error(); err != nil {
				t.Fatalf("CLIENT KILL ID %d on %s: %v", id, addr, err)
			}
			killed[addr] = append(killed[addr], id)
		}
	}
	if len(killed) == 0 {
		t.Fatalf("no connection named %s to kill", name)
	}
	for addr, ids := range killed {
		n := admin.Nodes()[addr]
		for !slices.ContainsFunc(clientIDs(t, n, name), func(id int64) bool { return !slices.Contains(ids, id) }) {
			if ctx.Err() != nil {
				t.Fatalf("%s never connected to %s again", name, addr)
			}
			if own, ok := c.Nodes()[addr]; ok {
				_ = own.Do(ctx, own.B().Ping().Build()).Error() // fails on the cut connection
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// clientIDs returns the ids of the connections named name to the node n.
func clientIDs(t *testing.T, n valkey.Client, name string) []int64 {
	t.Helper()
	list, err := n.Do(ctxT(t), n.B().ClientList().Build()).ToString()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	var ids []int64
	for line := range strings.Lines(strings.TrimPrefix(list, "txt:")) { // a verbatim string in RESP3
		fields := strings.Fields(line)
		if len(fields) == 0 || !slices.Contains(fields, "name="+name) {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimPrefix(fields[0], "id="), 10, 64)
		if err != nil {
			t.Fatalf("CLIENT LIST: %q", line)
		}
		ids = append(ids, id)
	}
	return ids
}
