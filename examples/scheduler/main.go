// Command scheduler runs a gocron job on several replicas with package
// leasescheduler: every scheduled slot runs exactly once, on whichever
// replica takes the slot's lease first, even though every replica's timer
// fires within milliseconds of the others. Each run makes one fenced write
// with package fence, under the run's lease.
//
//	go run ./examples/scheduler                                  # three replicas, memory backend
//	go run ./examples/scheduler -valkey 127.0.0.1:6379           # each replica its own connection
//	go run ./examples/scheduler -postgres postgres://localhost/app
//
// With -replicas 1 in several terminals, the replicas are separate
// processes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	leasememory "github.com/golib/lease/backends/memory"
	leasepostgres "github.com/golib/lease/backends/postgres"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler"
)

type config struct {
	valkeyAddr  string
	postgresURL string
	replicas    int
	// duration ends the program; 0 runs until interrupted.
	duration time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.valkeyAddr, "valkey", "", "Valkey address (host:port)")
	flag.StringVar(&cfg.postgresURL, "postgres", "", "PostgreSQL URL")
	flag.IntVar(&cfg.replicas, "replicas", 3, "replicas to run in this process")
	flag.DurationVar(&cfg.duration, "duration", 0, "stop after this long (default: at Ctrl-C)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if cfg.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.duration)
		defer cancel()
	}
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(1)
	}
}

// run runs cfg.replicas schedulers until ctx ends.
func run(ctx context.Context, cfg config, out io.Writer) error {
	open, where, err := backend(ctx, cfg)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	var mu sync.Mutex
	start := time.Now()
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "[%6.3fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	say("%d replica(s) on %s, a job every second", cfg.replicas, where)
	var schedulers []gocron.Scheduler
	var closers []func()
	defer func() {
		for _, s := range schedulers {
			_ = s.Shutdown() // waits for running jobs, which release their leases
		}
		for _, c := range closers {
			c()
		}
	}()
	for i := range cfg.replicas {
		r, err := open()
		if err != nil {
			return err
		}
		closers = append(closers, r.close)
		owner := fmt.Sprintf("scheduler-example/%s/%d", host, i+1)
		client, err := lease.NewClient(r.backend, lease.ClientOptions{Owner: owner})
		if err != nil {
			return err
		}
		s, err := newScheduler(client, report(r.write, owner, say))
		if err != nil {
			return err
		}
		schedulers = append(schedulers, s)
	}
	for _, s := range schedulers {
		s.Start()
	}
	<-ctx.Done()
	return nil
}

// docs:begin scheduler
// newScheduler returns a gocron scheduler whose job "report" runs once per
// one-second slot across every replica whose client shares the backend.
func newScheduler(client *lease.Client, report leasescheduler.JobFunc) (gocron.Scheduler, error) {
	locker, err := leasescheduler.NewLocker(client, leasescheduler.Options{
		// One run per slot: the job runs every second, on the second.
		Slots: leasescheduler.Every(time.Second),
	})
	if err != nil {
		return nil, err
	}
	// Every replica reads the schedule in UTC, whatever its local zone.
	s, err := gocron.NewScheduler(gocron.WithLocation(time.UTC))
	if err != nil {
		return nil, err
	}
	// The job's task runs report with the run's lease, which the job's own
	// locker takes; "report" names the lease, written once.
	task, jobLocker := locker.Job("report", report)
	_, err = s.NewJob(
		gocron.CronJob("* * * * * *", true), // every second, on the second
		task,
		gocron.WithDistributedJobLocker(jobLocker), // gocron locks each run with it
	)
	if err != nil {
		_ = s.Shutdown()
		return nil, err
	}
	return s, nil
}

// docs:end scheduler

// docs:begin report
// report returns the job: one fenced write under the run's lease. ctx is
// cancelled if the lease is lost; the fence refuses a write whose token
// is older than one it has accepted, so a paused replica that wakes up
// after its lease expired cannot write over a newer run.
func report(write func(context.Context, lease.Snapshot) error, owner string, say func(string, ...any)) leasescheduler.JobFunc {
	return func(ctx context.Context, run leasescheduler.Run) error {
		if err := write(ctx, run.Lease); err != nil {
			say("%s: slot %s: %v", owner, run.Slot.Start.Format("15:04:05"), err)
			return errors.Join(errors.New("fenced write failed"), err)
		}
		say("%s ran %s for slot %s with token %d", owner, run.Job, run.Slot.Start.Format("15:04:05"), run.Lease.Token)
		return nil
	}
}

// docs:end report

// A replica is what one replica needs: a lease backend on its own
// connection, and the job's fenced write.
type replica struct {
	backend lease.Backend
	write   func(context.Context, lease.Snapshot) error
	close   func()
}

// backend returns a function that opens one replica on the backend cfg
// names (Valkey, PostgreSQL, or memory shared by this process's replicas)
// and a description of it.
func backend(ctx context.Context, cfg config) (func() (*replica, error), string, error) {
	switch {
	case cfg.valkeyAddr != "":
		return func() (*replica, error) { return openValkey(cfg.valkeyAddr) }, "Valkey at " + cfg.valkeyAddr, nil
	case cfg.postgresURL != "":
		if err := migrate(ctx, cfg.postgresURL); err != nil {
			return nil, "", err
		}
		return func() (*replica, error) { return openPostgres(ctx, cfg.postgresURL) }, "PostgreSQL", nil
	}
	store := leasememory.New(leasememory.Options{})
	var fences fence.Memory
	return func() (*replica, error) {
		return &replica{
			backend: store,
			write: func(_ context.Context, snap lease.Snapshot) error {
				return fences.Do(snap, []string{"report"}, func() error { return nil })
			},
			close: func() {},
		}, nil
	}, "the memory backend (replicas of one process)", nil
}

// docs:begin valkey
// openValkey opens a replica on Valkey: leases and fences on the
// application's own client, and a counter incremented by a fenced INCRBY.
func openValkey(addr string) (*replica, error) {
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	store, err := leasevalkey.New(client, leasevalkey.Options{Prefix: "example:scheduler:lease:"})
	if err != nil {
		client.Close()
		return nil, err
	}
	fences, err := fencevalkey.New(client, fencevalkey.Options{Prefix: "example:scheduler:fence:"})
	if err != nil {
		client.Close()
		return nil, err
	}
	return &replica{
		backend: store,
		write: func(ctx context.Context, snap lease.Snapshot) error {
			_, err := fences.Do(ctx, snap, "report", fencevalkey.IncrBy("example:scheduler:{report}:runs", 1))
			return err
		},
		close: client.Close,
	}, nil
}

// docs:end valkey

// docs:begin postgres
// migrate creates the lease and fence tables and the example's own table.
func migrate(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		return err
	}
	if err := fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{}); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS scheduler_example_runs (job text PRIMARY KEY, runs bigint NOT NULL)`)
	return err
}

// openPostgres opens a replica on PostgreSQL: leases on the application's
// own pool, and a row updated in a transaction that checks the fence.
func openPostgres(ctx context.Context, url string) (*replica, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	store, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &replica{
		backend: store,
		write: func(ctx context.Context, snap lease.Snapshot) error {
			return fencepostgres.Tx(ctx, pool, snap, []string{"report"}, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO scheduler_example_runs (job, runs) VALUES ('report', 1)
					ON CONFLICT (job) DO UPDATE SET runs = scheduler_example_runs.runs + 1`)
				return err
			})
		},
		close: func() { _ = store.Close(); pool.Close() },
	}, nil
}

// docs:end postgres
