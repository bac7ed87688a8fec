package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	leasepostgres "github.com/golib/lease/backends/postgres"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/internal/valkeyplumbing"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

// config holds the connection flags.
type config struct {
	backend                 string
	valkey, valkeyPrefix    string
	fencePrefix             string
	postgres                string
	schema, table           string
	fenceSchema, fenceTable string
	queueSchema, queueTable string
	disableNotify, json     bool
	timeout                 time.Duration
	retention               time.Duration
	valkeySet, postgresSet  bool // given as flags (possibly empty)
}

func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.backend, "backend", "", "valkey or postgres, when both are configured")
	fs.Func("valkey", "Valkey `URL` or addresses (default $VALKEY_URL, $REDIS_URL)", func(s string) error {
		c.valkey, c.valkeySet = s, true
		return nil
	})
	fs.StringVar(&c.valkeyPrefix, "valkey-prefix", leasevalkey.DefaultPrefix, "the lease Store's key `prefix`")
	fs.StringVar(&c.fencePrefix, "fence-prefix", fencevalkey.DefaultPrefix, "the Valkey fence's key `prefix`")
	fs.Func("postgres", "PostgreSQL `DSN` (default $DATABASE_URL, then the PG* variables)", func(s string) error {
		c.postgres, c.postgresSet = s, true
		return nil
	})
	fs.StringVar(&c.schema, "schema", leasepostgres.DefaultSchema, "the lease table's `schema`")
	fs.StringVar(&c.table, "table", leasepostgres.DefaultTable, "the lease `table`")
	fs.StringVar(&c.fenceSchema, "fence-schema", fencepostgres.DefaultSchema, "the fences table's `schema`")
	fs.StringVar(&c.fenceTable, "fence-table", fencepostgres.DefaultTable, "the fences `table`")
	fs.StringVar(&c.queueSchema, "queue-schema", leasequeue.DefaultPostgresSchema, "the leasequeue tables' `schema`")
	fs.StringVar(&c.queueTable, "queue-table", leasequeue.DefaultPostgresTable, "the leasequeue items `table`")
	fs.BoolVar(&c.disableNotify, "disable-notify", false, "the application sets Options.DisableNotify")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on each operation")
	fs.DurationVar(&c.retention, "retention", 0, "the stores' Options.Retention, for gc (default lease.DefaultRetention)")
}

// target is the backend leasectl talks to.
type target struct {
	kind    string // "valkey" or "postgres"
	where   string // addresses or host/database: never a password
	backend lease.Backend
	lister  lease.Lister
	forcer  lease.ForceReleaser
	mark    func(ctx context.Context, resource string) (fence.Mark, error)
	// sweepers are what gc sweeps besides the backend: the fences.
	sweepers []named
	diagnose func(ctx context.Context) (problems []error, advice []string)
	close    func()
	// scope says where the records are looked for, and the flags that
	// change it, for a search that finds nothing.
	scope string
	// pool is the PostgreSQL pool, for migrate; nil on Valkey.
	pool *pgxpool.Pool
}

// named is a Sweeper and what its removals are ("fence" resources).
type named struct {
	what string
	s    lease.Sweeper
}

// choose decides the backend from the flags, then the environment.
func (c *cli) choose() (string, error) {
	cfg := &c.cfg
	switch cfg.backend {
	case "valkey", "postgres":
		return cfg.backend, nil
	case "":
	default:
		return "", usagef("--backend %q: want valkey or postgres", cfg.backend)
	}
	switch {
	case cfg.valkeySet && cfg.postgresSet:
		return "", usagef("both --valkey and --postgres given: pass one, or --backend")
	case cfg.valkeySet:
		return "valkey", nil
	case cfg.postgresSet:
		return "postgres", nil
	}
	v := c.getenv("VALKEY_URL") != "" || c.getenv("REDIS_URL") != ""
	p := c.getenv("DATABASE_URL") != "" || c.getenv("PGHOST") != "" || c.getenv("PGSERVICE") != "" || c.getenv("PGDATABASE") != ""
	switch {
	case v && p:
		return "", usagef("both Valkey ($VALKEY_URL or $REDIS_URL) and PostgreSQL ($DATABASE_URL or PG* variables) are configured: pass --backend")
	case v:
		return "valkey", nil
	case p:
		return "postgres", nil
	}
	return "", usagef("no backend: pass --valkey or --postgres (or set $VALKEY_URL, $DATABASE_URL or the PG* variables)")
}

func (c *cli) connect(ctx context.Context) (*target, error) {
	kind, err := c.choose()
	if err != nil {
		return nil, err
	}
	if c.cfg.timeout <= 0 {
		return nil, usagef("--timeout %v is not positive", c.cfg.timeout)
	}
	if kind == "valkey" {
		return c.connectValkey(ctx)
	}
	return c.connectPostgres(ctx)
}

// valkeyOption turns --valkey (or the environment) into client options.
func (c *cli) valkeyOption() (valkey.ClientOption, error) {
	s := c.cfg.valkey
	if !c.cfg.valkeySet {
		if s = c.getenv("VALKEY_URL"); s == "" {
			s = c.getenv("REDIS_URL")
		}
	}
	if s == "" {
		return valkey.ClientOption{}, usagef("--valkey is empty")
	}
	var opt valkey.ClientOption
	if strings.Contains(s, "://") {
		o, err := valkey.ParseURL(s)
		if err != nil {
			// The URL may hold a password: say what failed, not the value.
			return opt, usagef("the Valkey URL does not parse (scheme valkey://, redis://, rediss:// or unix://); its value is not shown, as it may hold a password")
		}
		opt = o
	} else {
		for a := range strings.SplitSeq(s, ",") {
			if a = strings.TrimSpace(a); a != "" {
				opt.InitAddress = append(opt.InitAddress, a)
			}
		}
	}
	if opt.Password == "" {
		if opt.Password = c.getenv("VALKEYCLI_AUTH"); opt.Password == "" {
			opt.Password = c.getenv("REDISCLI_AUTH")
		}
	}
	opt.DisableCache = true
	return opt, nil
}

func (c *cli) connectValkey(ctx context.Context) (*target, error) {
	opt, err := c.valkeyOption()
	if err != nil {
		return nil, err
	}
	client, err := valkey.NewClient(opt)
	if err != nil {
		return nil, valkeyConnectError(strings.Join(opt.InitAddress, ","), err)
	}
	store, err := leasevalkey.New(client, leasevalkey.Options{Prefix: c.cfg.valkeyPrefix, Retention: c.cfg.retention})
	if err != nil {
		client.Close()
		return nil, usagef("%v", err)
	}
	fv, err := fencevalkey.New(client, fencevalkey.Options{Prefix: c.cfg.fencePrefix, Retention: c.cfg.retention})
	if err != nil {
		client.Close()
		return nil, usagef("%v", err)
	}
	nodes := make([]string, 0)
	for addr := range client.Nodes() {
		nodes = append(nodes, addr)
	}
	slices.Sort(nodes)
	mode := "Valkey"
	if client.Mode() == valkey.ClientModeCluster {
		mode = "Valkey cluster"
	}
	return &target{
		kind:     "valkey",
		where:    fmt.Sprintf("%s at %s, prefix %q", mode, strings.Join(nodes, ","), store.Prefix()),
		backend:  store,
		lister:   store,
		forcer:   store,
		mark:     fv.Mark,
		sweepers: []named{{"fence", fv}},
		diagnose: func(ctx context.Context) ([]error, []string) {
			r := store.Diagnose(ctx)
			return r.Problems, r.Advice
		},
		close: client.Close,
		scope: fmt.Sprintf("Valkey prefix %q (if the services set another Options.Prefix, pass it with --valkey-prefix)", store.Prefix()),
	}, nil
}

func (c *cli) connectPostgres(ctx context.Context) (*target, error) {
	dsn := c.cfg.postgres
	if !c.cfg.postgresSet {
		dsn = c.getenv("DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The DSN may hold a password: say what failed, not the value.
		return nil, usagef("the PostgreSQL connection settings (--postgres, $DATABASE_URL or the PG* variables) do not parse; their value is not shown, as it may hold a password")
	}
	cfg.MaxConns = 4 // check's pooler probe holds two at once
	cfg.MinConns = 0
	if !execModeSet(dsn) {
		// The unnamed statement works through every pooler, PgBouncer in
		// transaction mode included; named prepared statements (pgx's
		// default) would collide with the services' on its sessions.
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	addr := pgplumbing.Addr(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, c.postgresConnectError(addr, scrub(err, cfg.ConnConfig.Password))
	}
	pctx, cancel := c.op(ctx)
	err = pool.Ping(pctx)
	cancel()
	if err != nil {
		pool.Close()
		return nil, c.postgresConnectError(addr, scrub(err, cfg.ConnConfig.Password))
	}
	store, err := leasepostgres.New(pool, leasepostgres.Options{Schema: c.cfg.schema, Table: c.cfg.table, DisableNotify: c.cfg.disableNotify, Retention: c.cfg.retention})
	if err != nil {
		pool.Close()
		return nil, usagef("%v", err)
	}
	ft, err := fencepostgres.NewTable(fencepostgres.TableOptions{Schema: c.cfg.fenceSchema, Table: c.cfg.fenceTable, Retention: c.cfg.retention})
	if err != nil {
		pool.Close()
		return nil, usagef("%v", err)
	}
	cc := cfg.ConnConfig
	return &target{
		kind:     "postgres",
		where:    fmt.Sprintf("PostgreSQL at %s:%d, database %q as %q, table %s", cc.Host, cc.Port, cc.Database, cc.User, store.Table()),
		backend:  store,
		lister:   store,
		forcer:   store,
		mark:     func(ctx context.Context, r string) (fence.Mark, error) { return ft.Mark(ctx, pool, r) },
		sweepers: []named{{"fence", ft.Sweeper(pool)}},
		diagnose: func(ctx context.Context) ([]error, []string) {
			return c.diagnosePostgres(ctx, pool, store, ft)
		},
		close: func() { store.Close(); pool.Close() },
		scope: fmt.Sprintf("table %s (if the services use another, pass --schema and --table)", store.Table()),
		pool:  pool,
	}, nil
}

// scrub removes password from err's text, should a driver ever quote it.
func scrub(err error, password string) error {
	if err == nil || password == "" || !strings.Contains(err.Error(), password) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), password, "********"))
}

// execModeSet reports whether the connection string dsn chooses pgx's exec
// mode itself (default_query_exec_mode), which leasectl then keeps.
func execModeSet(dsn string) bool {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return false
	}
	_, ok := cfg.RuntimeParams["default_query_exec_mode"]
	return ok
}

// postgresConnectError says that connecting to the server at addr failed,
// naming the address once, and what a silent port means.
func (c *cli) postgresConnectError(addr string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("connecting to PostgreSQL at %s: no answer within %v (--timeout): is a PostgreSQL server listening there, reachable through the firewall? %w", addr, c.cfg.timeout, err)
	}
	if first, _, _ := strings.Cut(addr, ","); strings.Contains(err.Error(), first) {
		return fmt.Errorf("connecting to PostgreSQL: %w", err) // pgconn named it
	}
	return fmt.Errorf("connecting to PostgreSQL at %s: %w", addr, err)
}

// valkeyConnectError says that connecting to Valkey at addrs failed, and
// what an answer that is not RESP means.
func valkeyConnectError(addrs string, err error) error {
	if valkeyplumbing.NotRESP(err) {
		return fmt.Errorf("connecting to Valkey at %s: the server there does not speak RESP, the protocol of Valkey and Redis (is that a Valkey port? another service, such as an HTTP server, answers it): %w", addrs, err)
	}
	return fmt.Errorf("connecting to Valkey at %s: %w", addrs, err)
}
