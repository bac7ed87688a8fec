package cache_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/cache"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// A topology names a way to reach Valkey: the package's shared standalone
// server or its shared 3-primary cluster.
type topology struct {
	name  string
	addrs func(testing.TB) []string
}

var topologies = []topology{
	{"standalone", func(t testing.TB) []string { return []string{testserver.Valkey(t).Addr()} }},
	{"cluster", func(t testing.TB) []string { return testserver.ValkeyCluster(t).Addrs() }},
}

// forEachTopology runs f as a parallel subtest on each topology.
func forEachTopology(t *testing.T, f func(t *testing.T, topo topology)) {
	t.Helper()
	for _, topo := range topologies {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			f(t, topo)
		})
	}
}

// newClient returns a valkey-go client for addrs, closed when t ends.
func newClient(t testing.TB, addrs []string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey.NewClient(%v): %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

var namespaces atomic.Int64

// namespace returns a prefix no other test uses, so that tests can share
// a server.
func namespace() string {
	return fmt.Sprintf("t%d-%d", time.Now().UnixNano()%1e6, namespaces.Add(1))
}

// replica is what one process of a service has: its own valkey-go client,
// lease Store, lease client and Cache.
type replica struct {
	client valkey.Client
	store  *leasevalkey.Store
	leases *lease.Client
	cache  *cache.Cache
}

// newReplica returns a replica in namespace ns on addrs. Replicas in the
// same namespace share their leases and entries.
func newReplica(t testing.TB, addrs []string, ns, owner string, o cache.Options) *replica {
	t.Helper()
	r := &replica{client: newClient(t, addrs)}
	var err error
	if r.store, err = leasevalkey.New(r.client, leasevalkey.Options{Prefix: ns + "-lease:"}); err != nil {
		t.Fatal(err)
	}
	if r.leases, err = lease.NewClient(r.store, lease.ClientOptions{Owner: owner}); err != nil {
		t.Fatal(err)
	}
	o.Prefix = ns + "-cache:"
	if o.TTL == 0 {
		o.TTL = time.Minute
	}
	if r.cache, err = cache.New(r.client, r.leases, o); err != nil {
		t.Fatal(err)
	}
	return r
}

// ctxT returns a context that ends when t does, or after 60s.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// policy returns a lease policy with the given TTL.
func policy(t testing.TB, o lease.PolicyOptions) lease.Policy {
	t.Helper()
	p, err := lease.NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// shortPolicy returns a policy whose lease ends soon, for a holder that is
// "paused": it never renews. Its operations still get 100ms, so that a
// loaded machine does not make them time out.
func shortPolicy(t testing.TB) lease.Policy {
	return policy(t, lease.PolicyOptions{TTL: 500 * time.Millisecond, OperationTimeout: 100 * time.Millisecond})
}

// rawValue returns what the server holds as key's value, and whether it
// holds one, without going through Get.
func rawValue(t testing.TB, r *replica, key string) (string, bool) {
	t.Helper()
	_, value, _, _, _ := r.cache.EntryNames(key)
	v, err := r.client.Do(ctxT(t), r.client.B().Get().Key(value).Build()).ToString()
	if valkey.IsValkeyNil(err) {
		return "", false
	}
	if err != nil {
		t.Fatalf("GET %s: %v", value, err)
	}
	// Drop the header: mode, token, newline.
	_, v, ok := strings.Cut(v, "\n")
	if !ok {
		t.Fatalf("GET %s = %q, which has no header", value, v)
	}
	return v, true
}

// entryIsNothingOr fails t unless key's entry is missing or holds want.
func entryIsNothingOr(t testing.TB, r *replica, key, want string) {
	t.Helper()
	if v, ok := rawValue(t, r, key); ok && v != want {
		t.Fatalf("entry %q holds %q; want nothing or %q", key, v, want)
	}
}

// constant returns a load function that returns v and counts its calls.
func constant(v string, calls *atomic.Int64) cache.LoadFunc {
	return func(context.Context, lease.Token) ([]byte, error) {
		if calls != nil {
			calls.Add(1)
		}
		return []byte(v), nil
	}
}
