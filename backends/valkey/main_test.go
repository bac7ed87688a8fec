package valkey_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// newClient returns a valkey-go client for the servers at addrs, closed
// when t ends.
func newClient(t testing.TB, addrs ...string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey.NewClient(%v): %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

var prefixes atomic.Int64

// newStore returns a Store on c with a prefix of its own.
func newStore(t testing.TB, c valkey.Client) *leasevalkey.Store {
	t.Helper()
	return newStoreWith(t, c, leasevalkey.Options{})
}

// newStoreWith returns a Store on c with options o and a prefix of its
// own.
func newStoreWith(t testing.TB, c valkey.Client, o leasevalkey.Options) *leasevalkey.Store {
	t.Helper()
	o.Prefix = fmt.Sprintf("t%d-%d:", time.Now().UnixNano()%1e6, prefixes.Add(1))
	s, err := leasevalkey.New(c, o)
	if err != nil {
		t.Fatalf("leasevalkey.New: %v", err)
	}
	return s
}

// standalone returns a client for the package's shared standalone server.
func standalone(t testing.TB) valkey.Client {
	t.Helper()
	return newClient(t, testserver.Valkey(t).Addr())
}

// cluster returns a client for the package's shared 3-primary cluster.
func cluster(t testing.TB) valkey.Client {
	t.Helper()
	return newClient(t, testserver.ValkeyCluster(t).Addrs()...)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestExamples runs the package's examples against the shared server.
func TestExamples(t *testing.T) {
	addr = testserver.Valkey(t).Addr()
	Example()
	ExampleStore_Guard()
}
