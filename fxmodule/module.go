package fxmodule

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"
	"go.uber.org/fx"
	"go.uber.org/zap"

	leasememory "github.com/golib/lease/backends/memory"
	leasepostgres "github.com/golib/lease/backends/postgres"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/lease"
)

// Module provides a *lease.Client, its lease.Backend, the default
// lease.Policy and *Leases, built by New from a Config and the
// application's own valkey.Client or *pgxpool.Pool. It needs a Config in
// the graph (fx.Supply or a constructor) and provides nothing else: no
// logger, no pool, no client.
var Module = fx.Module("lease",
	fx.Provide(New),
)

// ObserverGroup is the name of the value group whose lease.Observer values
// receive every lease event besides the module's zap logger: provide
// metrics adapters to it with
//
//	fx.Provide(fx.Annotate(newMetrics, fx.ResultTags(`group:"lease.observers"`)))
const ObserverGroup = "lease.observers"

// Params are New's inputs. Only Config is required. Outside Fx, fill in the
// fields and call New directly, then Leases.Start and Leases.Stop.
type Params struct {
	fx.In

	// Config chooses the backend and the default policy.
	Config Config

	// Lifecycle, if not nil, gets Leases.Start and Leases.Stop as hooks.
	// Fx always provides it.
	Lifecycle fx.Lifecycle `optional:"true"`

	// Shutdowner lets functions run with Leases.Go shut the app down when
	// their lease is lost (RunOptions.ShutdownOnLoss). Fx always provides
	// it.
	Shutdowner fx.Shutdowner `optional:"true"`

	// Logger receives the module's lines and one line per lease event,
	// under the name "lease". Default: none (zap.NewNop()).
	Logger *zap.Logger `optional:"true"`

	// Valkey is the application's client, used when Config.Backend is
	// Valkey. The module never closes it.
	Valkey valkey.Client `optional:"true"`

	// Pool is the application's pool, used when Config.Backend is
	// Postgres. The module never closes it.
	Pool *pgxpool.Pool `optional:"true"`

	// Clock, if not nil, tells time for the client and, with the Memory
	// backend, decides expiry too: tests pass a leasetest.FakeClock.
	// Default lease.SystemClock().
	Clock lease.Clock `optional:"true"`

	// Observers receive every lease event too; see ObserverGroup.
	Observers []lease.Observer `group:"lease.observers"`
}

// Result is what New provides.
type Result struct {
	fx.Out

	// Client acquires leases for Config.Owner. Leases acquired with it
	// directly are the caller's to release; those acquired through Leases
	// are released when the app stops.
	Client *lease.Client
	// Backend is the store behind Client: a *leasevalkey.Store,
	// *leasepostgres.Store or *leasememory.Store, for Inspect, guards and
	// checks.
	Backend lease.Backend
	// Policy is the default policy from Config.Policy.
	Policy lease.Policy
	// Leases acquires leases and runs functions under them for the app's
	// lifetime, and releases them in order when it stops.
	Leases *Leases
}

// New validates p.Config, builds the backend it names on the application's
// client or pool, and returns the client and Leases. With a Lifecycle it
// appends one hook: Leases.Start on start (migrations, checks, functions
// registered with Leases.Go) and Leases.Stop on stop.
//
// It does no I/O. Its errors name the Config field at fault, so that an
// invalid configuration fails fx.New rather than the first acquisition.
func New(p Params) (Result, error) {
	c := p.Config
	policy, err := c.policy()
	if err != nil {
		return Result{}, err
	}
	logger := p.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	logger = logger.Named("lease")
	l := &Leases{
		policy:         policy,
		prefix:         c.KeyPrefix,
		releaseTimeout: c.ReleaseTimeout,
		log:            logger,
		shutdowner:     p.Shutdowner,
		held:           make(map[*Lease]struct{}),
	}
	if l.releaseTimeout == 0 {
		l.releaseTimeout = policy.Options().OperationTimeout
	}

	var backend lease.Backend
	switch c.Backend {
	case Valkey:
		if p.Valkey == nil {
			return Result{}, errors.New(`leasefx: Config.Backend is "valkey", but the graph has no valkey.Client: provide the application's client`)
		}
		s, err := leasevalkey.New(p.Valkey, leasevalkey.Options{Prefix: c.Valkey.Prefix})
		if err != nil {
			return Result{}, fmt.Errorf("leasefx: Config.Valkey: %w", err)
		}
		if c.Valkey.Check {
			l.onStart = append(l.onStart, s.Check)
		}
		backend = s
	case Postgres:
		if p.Pool == nil {
			return Result{}, errors.New(`leasefx: Config.Backend is "postgres", but the graph has no *pgxpool.Pool: provide the application's pool`)
		}
		o := leasepostgres.Options{
			Schema:        c.Postgres.Schema,
			Table:         c.Postgres.Table,
			Unlogged:      c.Postgres.Unlogged,
			DisableNotify: c.Postgres.DisableNotify,
		}
		s, err := leasepostgres.New(p.Pool, o)
		if err != nil {
			return Result{}, fmt.Errorf("leasefx: Config.Postgres: %w", err)
		}
		if c.Postgres.Migrate {
			pool := p.Pool
			l.onStart = append(l.onStart, func(ctx context.Context) error {
				return leasepostgres.Migrate(ctx, pool, o)
			})
		}
		l.onClose = s.Close
		backend = s
	case Memory:
		backend = leasememory.New(leasememory.Options{Clock: p.Clock})
	}

	observers := append([]lease.Observer{NewZapObserver(logger)}, p.Observers...)
	client, err := lease.NewClient(backend, lease.ClientOptions{
		Owner:     c.Owner,
		Clock:     p.Clock,
		Observer:  lease.MultiObserver(observers...),
		Preferred: c.Preferred,
	})
	if err != nil {
		return Result{}, fmt.Errorf("leasefx: %w", err)
	}
	l.client = client
	if p.Lifecycle != nil {
		p.Lifecycle.Append(fx.Hook{OnStart: l.Start, OnStop: l.Stop})
	}
	return Result{Client: client, Backend: backend, Policy: policy, Leases: l}, nil
}
