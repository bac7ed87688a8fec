package chaos

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	leasepostgres "github.com/golib/lease/backends/postgres"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/lease"
)

// Target says where the clients of a run keep their leases and resources.
// It is plain data, so that a child process can be given it.
type Target struct {
	// Kind is "valkey" or "postgres".
	Kind string `json:"kind"`

	// Addr is the Valkey server of the leases (host:port), maybe a proxy.
	Addr string `json:"addr,omitempty"`
	// FenceAddr is the Valkey server of the fenced resources; default
	// Addr. A run whose lease server loses data keeps its resources
	// elsewhere: a fence is only as durable as the store it lives in.
	FenceAddr string `json:"fence_addr,omitempty"`
	// Prefix starts every Valkey key of the run.
	Prefix string `json:"prefix,omitempty"`
	// Username and Password authenticate to Valkey, if set.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`

	// URL is the PostgreSQL database of the leases and the resources,
	// maybe through a proxy. Run leasepostgres.Migrate and MigratePostgres
	// on it first.
	URL string `json:"url,omitempty"`
	// Guarded makes PostgreSQL writes guard transactions (see
	// GuardedPostgresStore).
	Guarded bool `json:"guarded,omitempty"`
	// Retention is the lease store's Options.Retention: how long it keeps
	// the record of an ended lease. Default the store's.
	Retention time.Duration `json:"retention,omitempty"`

	// Columns keeps the resources in rows fenced by columns of their own,
	// written with fencecolumn.Update and fencecolumn.Upsert (see ColumnStore). Run
	// MigrateColumns first.
	Columns bool `json:"columns,omitempty"`
}

// Open implements Open for the target.
func (tg Target) Open(ctx context.Context, name string) (lease.Backend, Store, func(), error) {
	switch tg.Kind {
	case "valkey":
		return tg.openValkey(name)
	case "postgres":
		return tg.openPostgres(ctx, name)
	}
	return nil, nil, nil, fmt.Errorf("chaos: unknown target kind %q", tg.Kind)
}

// ValkeyClient returns a valkey-go client of addr as the run's clients
// make them: no client-side cache, and a short write timeout so that a
// connection that stopped answering is closed in time.
func (tg Target) ValkeyClient(addr string) (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{
		InitAddress:      []string{addr},
		Username:         tg.Username,
		Password:         tg.Password,
		DisableCache:     true,
		ConnWriteTimeout: 2 * time.Second,
		Dialer:           net.Dialer{Timeout: 2 * time.Second},
	})
}

func (tg Target) openValkey(name string) (lease.Backend, Store, func(), error) {
	c, err := tg.ValkeyClient(tg.Addr)
	if err != nil {
		return nil, nil, nil, err
	}
	fc := c
	if tg.FenceAddr != "" && tg.FenceAddr != tg.Addr {
		if fc, err = tg.ValkeyClient(tg.FenceAddr); err != nil {
			c.Close()
			return nil, nil, nil, err
		}
	}
	closeFn := func() {
		c.Close()
		if fc != c {
			fc.Close()
		}
	}
	b, err := leasevalkey.New(c, leasevalkey.Options{Prefix: tg.Prefix + "lease:", Retention: tg.Retention})
	if err != nil {
		closeFn()
		return nil, nil, nil, err
	}
	s, err := NewValkeyStore(fc, tg.Prefix)
	if err != nil {
		closeFn()
		return nil, nil, nil, err
	}
	_ = name // Valkey connections are not looked up by name
	return b, s, closeFn, nil
}

func (tg Target) openPostgres(ctx context.Context, name string) (lease.Backend, Store, func(), error) {
	pool, err := Pool(ctx, tg.URL, name, 4)
	if err != nil {
		return nil, nil, nil, err
	}
	b, err := leasepostgres.New(pool, leasepostgres.Options{Retention: tg.Retention})
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	closeFn := func() {
		_ = b.Close()
		pool.Close()
	}
	switch {
	case tg.Guarded:
		return b, NewGuardedPostgresStore(pool, b), closeFn, nil
	case tg.Columns:
		h := fnv.New64a()
		_, _ = h.Write([]byte(name))
		return b, NewColumnStore(pool, h.Sum64()), closeFn, nil
	}
	return b, NewPostgresStore(pool), closeFn, nil
}

// Pool returns a pool of at most size connections to the database at
// dbURL, whose sessions carry application_name name (so that a nemesis
// finds them in pg_stat_activity).
func Pool(ctx context.Context, dbURL, name string, size int32) (*pgxpool.Pool, error) {
	if _, err := url.Parse(dbURL); err != nil {
		return nil, errors.New("chaos: bad PostgreSQL URL")
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = size
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	return pgxpool.NewWithConfig(ctx, cfg)
}
