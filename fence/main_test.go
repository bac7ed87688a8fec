package fence_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence/fencecolumn"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// col names the fence columns of the tests' own tables.
var col = fencecolumn.Column{Token: "fence_token", Key: "fence_key"}

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newPool returns a pool on a fresh database of the shared server, with
// the default fences table migrated.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := testserver.Postgres(t).NewDatabase(t)
	ctx := ctxT(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return pool
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

// snap returns a snapshot of lease key with token.
func snap(key string, token lease.Token) lease.Snapshot {
	return lease.Snapshot{Key: key, Owner: "owner-of-" + token.String(), Token: token}
}
