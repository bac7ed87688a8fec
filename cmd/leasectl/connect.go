package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
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
	// fenceValkey and fencePostgres name the store of the fences when it
	// is not the lease's.
	fenceValkey, fencePostgres       string
	fenceValkeySet, fencePostgresSet bool
}

func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.backend, "backend", "", "the backend `NAME`, valkey or postgres, when both are configured")
	fs.Func("valkey", "Valkey `URL` or addresses (default $VALKEY_URL, $REDIS_URL)", func(s string) error {
		c.valkey, c.valkeySet = s, true
		return nil
	})
	fs.StringVar(&c.valkeyPrefix, "valkey-prefix", leasevalkey.DefaultPrefix, "the lease Store's key prefix `P`")
	fs.StringVar(&c.fencePrefix, "fence-prefix", fencevalkey.DefaultPrefix, "the Valkey fence's key prefix `P`")
	fs.Func("postgres", "PostgreSQL `DSN` (default $DATABASE_URL, then the PG* variables)", func(s string) error {
		c.postgres, c.postgresSet = s, true
		return nil
	})
	fs.StringVar(&c.schema, "schema", leasepostgres.DefaultSchema, "the lease table's schema `S`")
	fs.StringVar(&c.table, "table", leasepostgres.DefaultTable, "the lease table `T`")
	fs.StringVar(&c.fenceSchema, "fence-schema", fencepostgres.DefaultSchema, "the fences table's schema `S`")
	fs.StringVar(&c.fenceTable, "fence-table", fencepostgres.DefaultTable, "the fences table `T`")
	fs.Func("fence-valkey", "read the fences from the Valkey at `URL` or addresses, not from the lease's store", func(s string) error {
		c.fenceValkey, c.fenceValkeySet = s, true
		return nil
	})
	fs.Func("fence-postgres", "read the fences from the PostgreSQL at `DSN`, not from the lease's store", func(s string) error {
		c.fencePostgres, c.fencePostgresSet = s, true
		return nil
	})
	fs.StringVar(&c.queueSchema, "queue-schema", leasequeue.DefaultPostgresSchema, "the leasequeue tables' `schema`")
	fs.StringVar(&c.queueTable, "queue-table", leasequeue.DefaultPostgresTable, "the leasequeue items `table`")
	fs.BoolVar(&c.disableNotify, "disable-notify", false, "the application sets Options.DisableNotify")
	fs.BoolVar(&c.json, "json", false, "print JSON; errors too, as {\"error\", \"kind\", \"exit\"}")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound `D` on connecting and on each operation")
	fs.DurationVar(&c.retention, "retention", 0, "gc removes what ended longer than `D` ago: give the services' Options.Retention (default lease.DefaultRetention, 24h)")
}

// target is the backend leasectl talks to.
type target struct {
	kind  string // "valkey" or "postgres"
	where string // addresses or host/database: never a password
	// fenceWhere is where the fences are read, where unless the fence
	// flags name another store.
	fenceWhere string
	backend    lease.Backend
	lister     lease.Lister
	forcer     lease.ForceReleaser
	mark       func(ctx context.Context, resource string) (fence.Mark, error)
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
	if c.cfg.fenceValkeySet && c.cfg.fencePostgresSet {
		return nil, usagef("both --fence-valkey and --fence-postgres given: the fences live in one store")
	}
	var t *target
	if kind == "valkey" {
		t, err = c.connectValkey(ctx)
	} else {
		t, err = c.connectPostgres(ctx)
	}
	if err != nil {
		return nil, err
	}
	if c.cfg.fenceValkeySet || c.cfg.fencePostgresSet {
		if err := c.connectFences(ctx, t); err != nil {
			t.close()
			return nil, err
		}
	}
	return t, nil
}

// valkeyURL returns --valkey, or the environment's default.
func (c *cli) valkeyURL() string {
	s := c.cfg.valkey
	if !c.cfg.valkeySet {
		if s = c.getenv("VALKEY_URL"); s == "" {
			s = c.getenv("REDIS_URL")
		}
	}
	return s
}

// valkeyOption turns a Valkey URL or addresses, from flag, into client
// options. --timeout bounds connecting (valkey-go's dial timeout, which
// also bounds the handshake of each new connection).
func (c *cli) valkeyOption(flag, s string) (valkey.ClientOption, error) {
	if s == "" {
		return valkey.ClientOption{}, usagef("%s is empty", flag)
	}
	var opt valkey.ClientOption
	if strings.Contains(s, "://") {
		o, err := valkey.ParseURL(s)
		if err != nil {
			// The URL may hold a password: say what failed, not the value.
			return opt, usagef("the Valkey URL of %s does not parse (scheme valkey://, redis://, rediss:// or unix://); its value is not shown, as it may hold a password", flag)
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
	if opt.Dialer.Timeout == 0 || opt.Dialer.Timeout > c.cfg.timeout {
		opt.Dialer.Timeout = c.cfg.timeout
	}
	return opt, nil
}

// newValkey connects to the Valkey at s, given as flag.
func (c *cli) newValkey(flag, s string) (valkey.Client, error) {
	opt, err := c.valkeyOption(flag, s)
	if err != nil {
		return nil, err
	}
	client, err := valkey.NewClient(opt)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, fmt.Errorf("connecting to Valkey at %s: no answer within --timeout %v: %w", strings.Join(opt.InitAddress, ","), c.cfg.timeout, err)
	}
	if err != nil {
		return nil, valkeyConnectError(strings.Join(opt.InitAddress, ","), err)
	}
	return client, nil
}

// valkeyWhere describes the Valkey behind client: never a password.
func valkeyWhere(client valkey.Client) string {
	nodes := make([]string, 0)
	for addr := range client.Nodes() {
		nodes = append(nodes, addr)
	}
	slices.Sort(nodes)
	mode := "Valkey"
	if client.Mode() == valkey.ClientModeCluster {
		mode = "Valkey cluster"
	}
	return mode + " at " + strings.Join(nodes, ",")
}

func (c *cli) connectValkey(ctx context.Context) (*target, error) {
	client, err := c.newValkey("--valkey", c.valkeyURL())
	if err != nil {
		return nil, err
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
	where := fmt.Sprintf("%s, prefix %q", valkeyWhere(client), store.Prefix())
	return &target{
		kind:       "valkey",
		where:      where,
		fenceWhere: fmt.Sprintf("%s, fence prefix %q", valkeyWhere(client), c.cfg.fencePrefix),
		backend:    store,
		lister:     store,
		forcer:     store,
		mark:       fv.Mark,
		sweepers:   []named{{"fence", fv}},
		diagnose: func(ctx context.Context) ([]error, []string) {
			r := store.Diagnose(ctx)
			return r.Problems, r.Advice
		},
		close: client.Close,
		scope: fmt.Sprintf("Valkey prefix %q (if the services set another Options.Prefix, pass it with --valkey-prefix)", store.Prefix()),
	}, nil
}

// newPostgres connects to the PostgreSQL at dsn, given as what (the flag
// or the variables it came from).
func (c *cli) newPostgres(ctx context.Context, what, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The DSN may hold a password: say what failed, not the value.
		return nil, usagef("the PostgreSQL connection settings (%s) do not parse; their value is not shown, as it may hold a password", what)
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
	return pool, nil
}

// postgresWhere describes the database of pool: never a password.
func postgresWhere(pool *pgxpool.Pool) string {
	cc := pool.Config().ConnConfig
	return fmt.Sprintf("PostgreSQL at %s:%d, database %q as %q", cc.Host, cc.Port, cc.Database, cc.User)
}

func (c *cli) connectPostgres(ctx context.Context) (*target, error) {
	dsn := c.cfg.postgres
	if !c.cfg.postgresSet {
		dsn = c.getenv("DATABASE_URL")
	}
	pool, err := c.newPostgres(ctx, "--postgres, $DATABASE_URL or the PG* variables", dsn)
	if err != nil {
		return nil, err
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
	return &target{
		kind:       "postgres",
		where:      fmt.Sprintf("%s, table %s", postgresWhere(pool), store.Table()),
		fenceWhere: fmt.Sprintf("%s, table %s", postgresWhere(pool), ft.Name()),
		backend:    store,
		lister:     store,
		forcer:     store,
		mark:       func(ctx context.Context, r string) (fence.Mark, error) { return ft.Mark(ctx, pool, r) },
		sweepers:   []named{{"fence", ft.Sweeper(pool)}},
		diagnose: func(ctx context.Context) ([]error, []string) {
			return c.diagnosePostgres(ctx, pool, store, ft)
		},
		close: func() { store.Close(); pool.Close() },
		scope: fmt.Sprintf("table %s (if the services use another, pass --schema and --table)", store.Table()),
		pool:  pool,
	}, nil
}

// connectFences points t's fences (fence show, gc) at the store that
// --fence-valkey or --fence-postgres names, with the fence flags
// (--fence-prefix, --fence-schema, --fence-table).
func (c *cli) connectFences(ctx context.Context, t *target) error {
	if c.cfg.fenceValkeySet {
		client, err := c.newValkey("--fence-valkey", c.cfg.fenceValkey)
		if err != nil {
			return err
		}
		fv, err := fencevalkey.New(client, fencevalkey.Options{Prefix: c.cfg.fencePrefix, Retention: c.cfg.retention})
		if err != nil {
			client.Close()
			return usagef("%v", err)
		}
		t.mark, t.sweepers = fv.Mark, []named{{"fence", fv}}
		t.fenceWhere = fmt.Sprintf("%s, fence prefix %q", valkeyWhere(client), c.cfg.fencePrefix)
		t.close = chain(t.close, client.Close)
		return nil
	}
	pool, err := c.newPostgres(ctx, "--fence-postgres", c.cfg.fencePostgres)
	if err != nil {
		return err
	}
	ft, err := fencepostgres.NewTable(fencepostgres.TableOptions{Schema: c.cfg.fenceSchema, Table: c.cfg.fenceTable, Retention: c.cfg.retention})
	if err != nil {
		pool.Close()
		return usagef("%v", err)
	}
	t.mark = func(ctx context.Context, r string) (fence.Mark, error) { return ft.Mark(ctx, pool, r) }
	t.sweepers = []named{{"fence", ft.Sweeper(pool)}}
	t.fenceWhere = fmt.Sprintf("%s, table %s", postgresWhere(pool), ft.Name())
	t.close = chain(t.close, pool.Close)
	return nil
}

// chain returns a function that calls first, then then.
func chain(first, then func()) func() {
	return func() { first(); then() }
}

// grantHint adds to an error that a server gave for want of a grant (a
// Valkey ACL's NOPERM, PostgreSQL's insufficient_privilege) where the
// runbook lists the grants of each command.
func grantHint(err error) error {
	var pgErr *pgconn.PgError
	if err != nil && (valkeyplumbing.NoPermission(err) || errors.As(err, &pgErr) && pgErr.Code == "42501") {
		return fmt.Errorf("%w (docs/operations.md lists the grants each leasectl command needs, under \"Grants leasectl needs\")", err)
	}
	return err
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
