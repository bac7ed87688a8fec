// Package backendenv sets up contenders on real Valkey and PostgreSQL
// servers for the integration tests of the lifecycle packages
// (leaseservice, leasescheduler): each contender gets its own connection
// and lease.Backend on one shared lease store, as replicas of a service
// would, and the test gets a fenced resource on the same server (package
// fence) to judge whether two holders ever ran at once.
//
// The servers come from internal/testkit/testserver, so a test binary that uses
// this package runs its tests through testserver.Main.
package backendenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	leasepostgres "github.com/golib/lease/backends/postgres"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// Env is one lease store on a real server that several contenders share.
type Env struct {
	// Name is "valkey" or "postgres".
	Name string
	// Addr is the server's host:port: the address to put a tcpproxy in
	// front of.
	Addr string
	// NewBackend returns a backend for one contender on its own
	// connection(s) to addr (Addr, or a proxy's address), closed when t
	// ends.
	NewBackend func(t testing.TB, addr string) lease.Backend
	// NewPollingBackend, if not nil, is NewBackend without release
	// notifications (leasepostgres with DisableNotify), whose waiters
	// must ask to see a release.
	NewPollingBackend func(t testing.TB, addr string) lease.Backend
	// SetupWakes is how often the backend may wake a new release watch
	// without a release, by design, while the watch is set up, in case
	// the key was released before the watch was in place (see
	// lease.ReleaseWatcher): the PostgreSQL backend wakes it once its
	// LISTEN is in place and once the key is marked for notification,
	// Valkey once its SUBSCRIBE is confirmed.
	SetupWakes int
	// Fence is a fenced resource on the same server, reached on a
	// connection of its own.
	Fence Fence
}

// Fence makes fenced writes with package fence: each named resource
// remembers the highest token it accepted and refuses a lower one,
// atomically with the write.
type Fence interface {
	// Write makes one fenced write to resource under the acquisition snap.
	// It reports false, and changes nothing, if the fence refused the
	// token as stale (fence.ErrStale).
	Write(ctx context.Context, snap lease.Snapshot, resource string) (bool, error)
}

// stale converts fence.ErrStale to a refusal.
func stale(err error) (bool, error) {
	if errors.Is(err, fence.ErrStale) {
		return false, nil
	}
	return err == nil, err
}

// Pauser stops and continues a dedicated server (SIGSTOP, SIGCONT). Call
// its methods from the test's goroutine.
type Pauser interface {
	Pause()
	Resume()
}

var prefixes atomic.Int64

// Valkey returns an Env on the shared Valkey server, with a key prefix of
// its own.
func Valkey(t testing.TB) *Env {
	t.Helper()
	return valkeyEnv(t, testserver.Valkey(t).Addr())
}

// DedicatedValkey returns an Env on a Valkey server of the test's own,
// which the Pauser stops and continues.
func DedicatedValkey(t testing.TB) (*Env, Pauser) {
	t.Helper()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	return valkeyEnv(t, srv.Addr()), srv
}

func valkeyEnv(t testing.TB, addr string) *Env {
	prefix := fmt.Sprintf("env%d-%d:", time.Now().UnixNano()%1e6, prefixes.Add(1))
	return &Env{
		Name: "valkey",
		Addr: addr,
		NewBackend: func(t testing.TB, addr string) lease.Backend {
			t.Helper()
			s, err := leasevalkey.New(valkeyClient(t, addr), leasevalkey.Options{Prefix: prefix})
			if err != nil {
				t.Fatalf("leasevalkey.New: %v", err)
			}
			return s
		},
		SetupWakes: ValkeySetupWakes,
		Fence:      valkeyFence(t, valkeyClient(t, addr), prefix),
	}
}

// valkeyClient returns a client of the server at addr, closed when t ends.
func valkeyClient(t testing.TB, addr string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey.NewClient(%s): %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

type valkeyWriter struct {
	f      *fencevalkey.Fence
	prefix string
}

func valkeyFence(t testing.TB, c valkey.Client, prefix string) *valkeyWriter {
	t.Helper()
	f, err := fencevalkey.New(c, fencevalkey.Options{Prefix: prefix + "fence:"})
	if err != nil {
		t.Fatalf("fencevalkey.New: %v", err)
	}
	return &valkeyWriter{f: f, prefix: prefix}
}

// Write sets the resource's value key (in the fence's hash slot) to the
// token.
func (w *valkeyWriter) Write(ctx context.Context, snap lease.Snapshot, resource string) (bool, error) {
	key := w.prefix + "{" + resource + "}:value"
	_, err := w.f.Do(ctx, snap, resource, fencevalkey.Set(key, snap.Token.String(), fencevalkey.SetOptions{}))
	return stale(err)
}

// PostgresSetupWakes and ValkeySetupWakes are Env.SetupWakes of the
// PostgreSQL and Valkey backends.
const (
	PostgresSetupWakes = 2
	ValkeySetupWakes   = 1
)

// Postgres returns an Env on a fresh database of the shared PostgreSQL
// server.
func Postgres(t testing.TB) *Env {
	t.Helper()
	return postgresEnv(t, testserver.Postgres(t).NewDatabase(t))
}

// DedicatedPostgres returns an Env on a PostgreSQL server of the test's
// own, which the Pauser stops and continues.
func DedicatedPostgres(t testing.TB) (*Env, Pauser) {
	t.Helper()
	srv := testserver.StartPostgres(t)
	return postgresEnv(t, srv.NewDatabase(t)), srv
}

func postgresEnv(t testing.TB, dbURL string) *Env {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse %q: %v", dbURL, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := pool(t, dbURL, 2)
	if err := leasepostgres.Migrate(ctx, admin, leasepostgres.Options{}); err != nil {
		t.Fatalf("leasepostgres.Migrate: %v", err)
	}
	if err := fencepostgres.Migrate(ctx, admin, fencepostgres.TableOptions{}); err != nil {
		t.Fatalf("fencepostgres.Migrate: %v", err)
	}
	if _, err := admin.Exec(ctx, `CREATE TABLE writes (resource text NOT NULL, token bigint NOT NULL)`); err != nil {
		t.Fatalf("create the writes table: %v", err)
	}
	newBackend := func(o leasepostgres.Options) func(t testing.TB, addr string) lease.Backend {
		return func(t testing.TB, addr string) lease.Backend {
			t.Helper()
			v := *u
			v.Host = addr
			s, err := leasepostgres.New(pool(t, v.String(), 4), o)
			if err != nil {
				t.Fatalf("leasepostgres.New: %v", err)
			}
			t.Cleanup(func() { s.Close() }) // before the pool closes
			return s
		}
	}
	return &Env{
		Name:              "postgres",
		Addr:              u.Host,
		NewBackend:        newBackend(leasepostgres.Options{}),
		NewPollingBackend: newBackend(leasepostgres.Options{DisableNotify: true}),
		SetupWakes:        PostgresSetupWakes,
		Fence:             &postgresFence{pool: admin},
	}
}

// pool returns a pool of at most size connections to url, closed when t
// ends.
func pool(t testing.TB, url string, size int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgxpool.ParseConfig: %v", err)
	}
	cfg.MaxConns = size
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgxpool.NewWithConfig: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

type postgresFence struct{ pool *pgxpool.Pool }

// Write inserts a row in a transaction fenced by snap.
func (f *postgresFence) Write(ctx context.Context, snap lease.Snapshot, resource string) (bool, error) {
	return stale(fencepostgres.Tx(ctx, f.pool, snap, []string{resource}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO writes (resource, token) VALUES ($1, $2)`, resource, int64(snap.Token))
		return err
	}))
}

// Kinds lists the Envs on shared servers, by name, for table tests.
var Kinds = []struct {
	Name string
	Env  func(testing.TB) *Env
}{
	{"valkey", Valkey},
	{"postgres", Postgres},
}

// DedicatedKinds lists the Envs on dedicated servers, by name.
var DedicatedKinds = []struct {
	Name string
	Env  func(testing.TB) (*Env, Pauser)
}{
	{"valkey", DedicatedValkey},
	{"postgres", DedicatedPostgres},
}
