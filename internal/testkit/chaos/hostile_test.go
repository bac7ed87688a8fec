package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"
	"pgregory.net/rapid"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// countingBackend counts the calls that reach the backend.
type countingBackend struct {
	lease.Backend
	n atomic.Int64
}

func (c *countingBackend) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	c.n.Add(1)
	return c.Backend.Acquire(ctx, r)
}

func (c *countingBackend) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	c.n.Add(1)
	return c.Backend.Renew(ctx, a, ttl)
}

func (c *countingBackend) Release(ctx context.Context, a lease.Acquisition) error {
	c.n.Add(1)
	return c.Backend.Release(ctx, a)
}

// hostileEnv is one server with sentinels that hostile input must not
// touch: keys outside the run's prefix on Valkey, a table of their own on
// PostgreSQL.
type hostileEnv struct {
	name    string
	b       *countingBackend
	store   chaos.Store
	valkey  bool
	fenced  map[string]string // resource → the lease key that fenced it first
	verify  func(t testing.TB)
	cleanup func()
}

// valkeySentinels are keys a hostile lease key, resource or value could
// aim at: another program's key, a lease record and a fence under the
// default prefixes, and a key in the run's own hash-tag shape.
var valkeySentinels = []string{"foreign:{x}", "lease:{k1}", "fence:{res-k1}", "{k1}", "x"}

func newHostileValkey(t testing.TB) *hostileEnv {
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	target := valkeyTarget(srv.Addr())
	b, s, closeFn, err := target.Open(context.Background(), "chaos-hostile")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := target.ValkeyClient(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range valkeySentinels {
		if err := admin.Do(ctx, admin.B().Set().Key(k).Value("sentinel "+k).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	return &hostileEnv{name: "valkey", b: &countingBackend{Backend: b}, store: s, valkey: true, fenced: map[string]string{},
		cleanup: func() { closeFn(); admin.Close() },
		verify: func(t testing.TB) {
			for _, k := range valkeySentinels {
				if v, err := admin.Do(ctx, admin.B().Get().Key(k).Build()).ToString(); err != nil || v != "sentinel "+k {
					t.Errorf("sentinel key %q was touched: %q, %v", k, v, err)
				}
			}
			keys, err := scanAll(ctx, admin)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if !strings.HasPrefix(k, target.Prefix) && !slices.Contains(valkeySentinels, k) {
					t.Errorf("key %q outside the prefix %q was written", k, target.Prefix)
				}
			}
		}}
}

func scanAll(ctx context.Context, c valkey.Client) ([]string, error) {
	var (
		all    []string
		cursor uint64
	)
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, err
		}
		all = append(all, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			return all, nil
		}
	}
}

// postgresTables are the tables a run may have: the lease table, the
// fences table and its floors, their migration records, the values, and
// the sentinel.
var postgresTables = []string{"chaos_values", "foreign_table", "lease_fences", "lease_fences_floors", "lease_fences_migrations", "leases", "leases_migrations"}

func newHostilePostgres(t testing.TB) *hostileEnv {
	url := testserver.Postgres(t).NewDatabase(t)
	ctx := context.Background()
	admin, err := chaos.Pool(ctx, url, "chaos-admin", 2)
	if err != nil {
		t.Fatal(err)
	}
	migrateWith(t, admin)
	if _, err := admin.Exec(ctx, `CREATE TABLE foreign_table (k text PRIMARY KEY, v text NOT NULL);
		INSERT INTO foreign_table VALUES ('k1', 'sentinel')`); err != nil {
		t.Fatal(err)
	}
	b, s, closeFn, err := chaos.Target{Kind: "postgres", URL: url}.Open(ctx, "chaos-hostile")
	if err != nil {
		t.Fatal(err)
	}
	return &hostileEnv{name: "postgres", b: &countingBackend{Backend: b}, store: s, fenced: map[string]string{},
		cleanup: func() { closeFn(); admin.Close() },
		verify: func(t testing.TB) {
			var rows []string
			r, err := admin.Query(ctx, `SELECT k || '=' || v FROM foreign_table`)
			if err != nil {
				t.Fatal(err)
			}
			for r.Next() {
				var s string
				_ = r.Scan(&s)
				rows = append(rows, s)
			}
			r.Close()
			if !slices.Equal(rows, []string{"k1=sentinel"}) {
				t.Errorf("the sentinel table was touched: %q", rows)
			}
			var tables []string
			r, err = admin.Query(ctx, `SELECT table_schema || '.' || table_name FROM information_schema.tables
				WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1`)
			if err != nil {
				t.Fatal(err)
			}
			for r.Next() {
				var s string
				_ = r.Scan(&s)
				tables = append(tables, strings.TrimPrefix(s, "public."))
			}
			r.Close()
			if !slices.Equal(tables, postgresTables) {
				t.Errorf("tables are %q, want %q", tables, postgresTables)
			}
		}}
}

// migrateWith creates the run's tables through admin.
func migrateWith(t testing.TB, admin *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	if err := leasepostgres.Migrate(ctx, admin, leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := chaos.MigratePostgres(ctx, admin); err != nil {
		t.Fatal(err)
	}
}

// hostileRound acquires key as owner, renews it, writes value to resource
// under the lease, reads it back and releases the lease, and checks that
// every input a rule refuses is refused with its typed error before any
// I/O, and that everything else works.
func (e *hostileEnv) hostileRound(key, owner, resource, value string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 5 * time.Second})
	if err != nil {
		return err
	}
	c, err := lease.NewClient(e.b, lease.ClientOptions{Owner: owner})
	if lease.ValidateOwner(owner) != nil {
		if !errors.Is(err, lease.ErrInvalidOwner) {
			return fmt.Errorf("owner %q: NewClient: %v, want ErrInvalidOwner", owner, err)
		}
		owner = "hostile-owner"
		if c, err = lease.NewClient(e.b, lease.ClientOptions{Owner: owner}); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("owner %q: NewClient: %w", owner, err)
	}
	before := e.b.n.Load()
	h, err := c.TryAcquire(ctx, key, p)
	if lease.ValidateKey(key) != nil {
		if !errors.Is(err, lease.ErrInvalidKey) || e.b.n.Load() != before {
			return fmt.Errorf("key %q: TryAcquire: %v after %d backend calls, want ErrInvalidKey before any", key, err, e.b.n.Load()-before)
		}
		if _, err := c.Inspect(ctx, key); !errors.Is(err, lease.ErrInvalidKey) {
			return fmt.Errorf("key %q: Inspect: %v, want ErrInvalidKey", key, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("key %q owner %q: TryAcquire: %w", key, owner, err)
	}
	defer func() { _ = h.Release(ctx) }()
	if err := h.Renew(ctx); err != nil {
		return fmt.Errorf("key %q: Renew: %w", key, err)
	}
	if rec, err := c.Inspect(ctx, key); err != nil || !rec.Held || rec.Owner != owner || rec.Token != h.Token() {
		return fmt.Errorf("key %q: Inspect: %+v, %v; want held by %q with token %d", key, rec, err, owner, h.Token())
	}
	snap := h.Snapshot()
	werr := e.store.Write(ctx, snap, resource, value)
	switch {
	case fence.ValidateResource(resource) != nil || e.valkey && strings.ContainsAny(resource, "{}"):
		if !errors.Is(werr, fence.ErrInvalid) {
			return fmt.Errorf("resource %q: write: %v, want fence.ErrInvalid", resource, werr)
		}
	case e.fenced[resource] != "" && e.fenced[resource] != key:
		if !errors.Is(werr, fence.ErrForeignLease) {
			return fmt.Errorf("resource %q fenced by %q: write under %q: %v, want fence.ErrForeignLease", resource, e.fenced[resource], key, werr)
		}
	case werr != nil:
		return fmt.Errorf("resource %q value %q: write: %w", resource, value, werr)
	default:
		e.fenced[resource] = key
		mark, got, err := e.store.Read(ctx, resource)
		if err != nil || mark != snap.Token || value != "" && got != value {
			return fmt.Errorf("resource %q: read %d %q, %v; want %d %q", resource, mark, got, err, snap.Token, value)
		}
	}
	if err := h.Release(ctx); err != nil {
		return fmt.Errorf("key %q: Release: %w", key, err)
	}
	return nil
}

// hostileRunes are characters that break naive key schemes, SQL and
// logs.
var hostileRunes = []rune{'{', '}', '%', '*', '?', '[', ']', ':', '\'', '"', ';', '-', '\\', '/', ' ',
	0, '\n', '\t', '\u200b', '\ufffd', '\u202e', 'é', '💥', '$', '(', ')', 'a', 'b', '0'}

// hostileStrings are inputs chosen by hand.
var hostileStrings = []string{"", "k1", "'; DROP TABLE leases; --", "lease:{k1}", "}{", "%7B", "{k1}", "a}:token",
	strings.Repeat("}", 1100), strings.Repeat("a", 1024), strings.Repeat("a", 1025), strings.Repeat("é", 513),
	"\xff\xfe", "a\x00b", "public.leases", "foreign:{x}", "x", "res-k1", "\u202eevil", "nil", "0"}

func hostileString() *rapid.Generator[string] {
	return rapid.OneOf(
		rapid.StringOfN(rapid.SampledFrom(hostileRunes), 0, 40, -1),
		rapid.SampledFrom(hostileStrings),
		rapid.String(),
	)
}

// pgValue makes a value storable in a PostgreSQL text column, which holds
// no NUL and only valid UTF-8 (a limit of the test's own table, not of the
// library).
func pgValue(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "?")
}

// TestHostileInput throws hostile keys, owners, resource names and
// values, and random policies, at the client, the backends and the
// fences on real servers: nothing may panic, every input a rule refuses
// must come back as its typed error before any I/O, every other input
// must work, and no key outside the run's prefix and no table but the
// library's own may be touched.
func TestHostileInput(t *testing.T) {
	envs := []*hostileEnv{newHostileValkey(t), newHostilePostgres(t)}
	for _, e := range envs {
		defer e.cleanup()
	}
	checks := 1
	if long() {
		checks = 20
	}
	for range checks {
		rapid.Check(t, func(rt *rapid.T) {
			key, owner := hostileString().Draw(rt, "key"), hostileString().Draw(rt, "owner")
			resource, value := hostileString().Draw(rt, "resource"), hostileString().Draw(rt, "value")
			for _, e := range envs {
				v := value
				if !e.valkey {
					v = pgValue(v)
				}
				if err := e.hostileRound(key, owner, resource, v); err != nil {
					rt.Fatalf("%s: %v", e.name, err)
				}
			}
			checkPolicy(rt)
		})
	}
	for _, e := range envs {
		e.verify(t)
	}
}

// checkPolicy draws a random PolicyOptions: NewPolicy must either refuse
// it with ErrInvalidPolicy or return a policy that keeps every rule.
func checkPolicy(rt *rapid.T) {
	d := func(name string) time.Duration {
		return time.Duration(rapid.Int64Range(-int64(time.Second), int64(30*time.Hour)).Draw(rt, name))
	}
	o := lease.PolicyOptions{TTL: d("ttl"), RenewEvery: d("renew"), SafetyMargin: d("margin"),
		OperationTimeout: d("timeout"), Retry: d("retry"), Wait: d("wait"), MaxAttempts: rapid.IntRange(-2, 5).Draw(rt, "attempts")}
	p, err := lease.NewPolicy(o)
	if err != nil {
		if !errors.Is(err, lease.ErrInvalidPolicy) {
			rt.Fatalf("NewPolicy(%+v): %v, want ErrInvalidPolicy", o, err)
		}
		return
	}
	g := p.Options()
	if g.TTL < lease.MinTTL || g.TTL > lease.MaxTTL || g.SafetyMargin >= g.TTL ||
		g.RenewEvery+g.Retry+2*g.OperationTimeout > g.TTL-g.SafetyMargin || g.Wait != o.Wait || g.MaxAttempts != o.MaxAttempts ||
		g.RenewEvery <= 0 || g.OperationTimeout <= 0 || g.Retry <= 0 {
		rt.Fatalf("NewPolicy(%+v) accepted %v, which breaks a rule", o, p)
	}
}

// FuzzHostileInput is TestHostileInput's round as a fuzz target, on both
// servers: `go test -fuzz FuzzHostileInput ./internal/testkit/chaos` explores
// further than rapid's generators.
func FuzzHostileInput(f *testing.F) {
	for i, s := range hostileStrings {
		f.Add(s, hostileStrings[(i+1)%len(hostileStrings)], hostileStrings[(i+2)%len(hostileStrings)], hostileStrings[(i+3)%len(hostileStrings)])
	}
	envs := []*hostileEnv{newHostileValkey(f), newHostilePostgres(f)}
	f.Cleanup(func() {
		for _, e := range envs {
			e.verify(f)
			e.cleanup()
		}
	})
	f.Fuzz(func(t *testing.T, key, owner, resource, value string) {
		for _, e := range envs {
			v := value
			if !e.valkey {
				v = pgValue(v)
			}
			if err := e.hostileRound(key, owner, resource, v); err != nil {
				t.Fatalf("%s: %v", e.name, err)
			}
		}
	})
}
