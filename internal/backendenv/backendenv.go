// Package backendenv sets up contenders on real Valkey and PostgreSQL
// servers for the integration tests of the lifecycle packages
// (leaseservice, leasescheduler): each contender gets its own connection
// and lease.Backend on one shared lease store, as replicas of a service
// would, and the test gets a fenced resource on the same server to judge
// whether two holders ever ran at once.
//
// The servers come from internal/testserver, so a test binary that uses
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
	"github.com/golib/lease/internal/testserver"
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
	// Fence is a fenced resource on the same server, reached on a
	// connection of its own.
	Fence Fence
}

// Fence is a store of fenced writes: each named resource remembers the
// highest token it accepted and rejects a lower one, atomically with the
// write. It stands in for package fence in tests.
type Fence interface {
	// Write records a write to resource with token tok. It reports false,
	// and changes nothing, if the resource already accepted a higher token.
	Write(ctx context.Context, resource string, tok lease.Token) (bool, error)
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
		Fence: &valkeyFence{client: valkeyClient(t, addr), prefix: prefix + "fence:"},
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

// fenceScript writes ARGV[1] to KEYS[1] unless KEYS[1] holds a higher
// number. Tokens stay below 2^53, so Lua numbers hold them exactly.
var fenceScript = valkey.NewLuaScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local tok = tonumber(ARGV[1])
if tok < cur then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1`)

type valkeyFence struct {
	client valkey.Client
	prefix string
}

func (f *valkeyFence) Write(ctx context.Context, resource string, tok lease.Token) (bool, error) {
	n, err := fenceScript.Exec(ctx, f.client, []string{f.prefix + resource}, []string{tok.String()}).AsInt64()
	return n == 1, err
}

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
	if _, err := admin.Exec(ctx, `CREATE TABLE fences (resource text PRIMARY KEY, token bigint NOT NULL)`); err != nil {
		t.Fatalf("create the fences table: %v", err)
	}
	return &Env{
		Name: "postgres",
		Addr: u.Host,
		NewBackend: func(t testing.TB, addr string) lease.Backend {
			t.Helper()
			v := *u
			v.Host = addr
			s, err := leasepostgres.New(pool(t, v.String(), 4), leasepostgres.Options{})
			if err != nil {
				t.Fatalf("leasepostgres.New: %v", err)
			}
			t.Cleanup(func() { s.Close() }) // before the pool closes
			return s
		},
		Fence: &postgresFence{pool: admin},
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

// Write upserts the resource's row unless it holds a higher token; the row
// lock serialises concurrent writers.
func (f *postgresFence) Write(ctx context.Context, resource string, tok lease.Token) (bool, error) {
	var ok bool
	err := f.pool.QueryRow(ctx, `
		INSERT INTO fences AS f (resource, token) VALUES ($1, $2)
		ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token
		RETURNING true`, resource, int64(tok)).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return ok, err
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
