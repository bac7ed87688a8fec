// Command fxapp is a small Uber Fx service with a singleton job: every
// replica runs the same app, and only the one holding the lease
// "fxapp/reporter" runs the reporter. When that replica stops, it releases
// the lease and another replica takes over at once; when it crashes, another
// takes over within one TTL. Run two replicas against one Valkey server:
//
//	go run ./examples/fxapp -replica a -valkey 127.0.0.1:6379 &
//	go run ./examples/fxapp -replica b -valkey 127.0.0.1:6379
//
// or against PostgreSQL with -postgres postgres://user@host/db. Stop one
// with Ctrl-C and watch the other take over. A replica that loses its lease
// (the server unreachable for longer than the TTL) exits with status 3, for
// the orchestrator to restart it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"

	leasefx "github.com/golib/lease/fxmodule"
	"github.com/golib/lease/lease"
)

func main() {
	var s settings
	flag.StringVar(&s.Replica, "replica", "a", "this replica's name")
	flag.StringVar(&s.ValkeyAddr, "valkey", "", "Valkey address (host:port)")
	flag.StringVar(&s.PostgresURL, "postgres", "", "PostgreSQL URL, instead of -valkey")
	flag.DurationVar(&s.TTL, "ttl", 10*time.Second, "lease TTL: how long a crashed replica blocks the others")
	flag.DurationVar(&s.Every, "every", 2*time.Second, "how often the reporter reports")
	flag.Parse()
	if (s.ValkeyAddr == "") == (s.PostgresURL == "") {
		fmt.Fprintln(os.Stderr, "fxapp: give one of -valkey and -postgres")
		os.Exit(2)
	}
	logger, err := zap.NewDevelopment()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fxapp:", err)
		os.Exit(1)
	}
	// Run stops the app on SIGINT or SIGTERM, and exits with the exit code
	// of a shutdown such as the one after a lost lease.
	newApp(s, logger, os.Stdout).Run()
}

// settings is the application's own configuration.
type settings struct {
	Replica     string
	ValkeyAddr  string
	PostgresURL string
	TTL         time.Duration
	Every       time.Duration
}

// docs:begin app
// newApp builds one replica. The application provides its own logger and
// its own Valkey client or PostgreSQL pool; leasefx.Module builds the lease
// client on them and never closes them.
func newApp(s settings, logger *zap.Logger, out io.Writer) *fx.App {
	return fx.New(
		fx.Supply(s, logger),
		fx.WithLogger(func(l *zap.Logger) fxevent.Logger { return &fxevent.ZapLogger{Logger: l} }),
		storage(s),
		fx.Provide(leaseConfig),
		leasefx.Module,
		fx.Provide(func() io.Writer { return out }, newReporter),
		fx.Invoke(startReporter),
	)
}

// leaseConfig builds the module's configuration from the application's.
func leaseConfig(s settings) leasefx.Config {
	c := leasefx.Config{
		Owner:     "fxapp/" + s.Replica,
		KeyPrefix: "fxapp/",
		Policy:    leasefx.PolicyConfig{TTL: s.TTL},
	}
	if s.ValkeyAddr != "" {
		c.Backend = leasefx.Valkey
		c.Valkey.Check = true // refuse a server that could evict leases
	} else {
		c.Backend = leasefx.Postgres
		c.Postgres.Migrate = true // create the lease table on start
	}
	return c
}

// docs:end app

// storage provides the application's Valkey client or PostgreSQL pool.
func storage(s settings) fx.Option {
	if s.ValkeyAddr != "" {
		return fx.Provide(newValkeyClient)
	}
	return fx.Provide(newPool)
}

// docs:begin clients
// newValkeyClient is the application's own client: the app builds it and
// closes it on stop, after the lease module has released its leases (Fx
// stops in the reverse order of construction).
func newValkeyClient(lc fx.Lifecycle, s settings) (valkey.Client, error) {
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{s.ValkeyAddr}})
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(client.Close))
	return client, nil
}

// newPool is the same for PostgreSQL.
func newPool(lc fx.Lifecycle, s settings) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(context.Background(), s.PostgresURL)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(pool.Close))
	return pool, nil
}

// docs:end clients

// docs:begin singleton
// reporter is the singleton work: only the replica holding the lease runs
// it.
type reporter struct {
	replica string
	every   time.Duration
	out     io.Writer
}

func newReporter(s settings, out io.Writer) *reporter {
	return &reporter{replica: s.Replica, every: s.Every, out: out}
}

// run reports until its context is cancelled: when the lease is lost or the
// app stops. Every write it makes should carry h.Token() (see package
// fence), so that a replica that was paused past its lease is rejected.
func (r *reporter) run(ctx context.Context, h *lease.Handle) error {
	fmt.Fprintf(r.out, "%s: elected with token %d\n", r.replica, h.Token())
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			fmt.Fprintf(r.out, "%s: stepping down: %v\n", r.replica, context.Cause(ctx))
			return nil
		case <-tick.C:
			fmt.Fprintf(r.out, "%s: report %d under token %d\n", r.replica, n, h.Token())
		}
	}
}

// startReporter registers the reporter with the module: it runs from the
// app's start to its stop, whenever this replica holds the lease. A lost
// lease shuts the app down with exit code 3.
func startReporter(leases *leasefx.Leases, r *reporter) error {
	_, err := leases.Go("reporter", r.run, leasefx.RunOptions{ShutdownOnLoss: true, ExitCode: 3})
	return err
}

// docs:end singleton
