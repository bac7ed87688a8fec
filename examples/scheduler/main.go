// Command scheduler runs a gocron job on several replicas with package
// leasescheduler: every scheduled slot runs exactly once, on whichever
// replica takes the slot's lease first, even though every replica's timer
// fires within milliseconds of the others.
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

	"github.com/golib/lease/internal/exampleenv"
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
	// Each replica gets a lease backend on a connection of its own and a
	// fenced counter to write to (package exampleenv).
	backend := exampleenv.Options{ValkeyAddr: cfg.valkeyAddr, PostgresURL: cfg.postgresURL, Prefix: "example:scheduler:"}
	open, err := exampleenv.Dial(ctx, backend)
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
	say("%d replica(s) on %s, a job every second", cfg.replicas, backend.Describe())
	var schedulers []gocron.Scheduler
	var envs []*exampleenv.Replica
	defer func() {
		for _, s := range schedulers {
			_ = s.Shutdown() // waits for running jobs, which release their leases
		}
		for _, env := range envs {
			env.Close()
		}
	}()
	for i := range cfg.replicas {
		env, err := open()
		if err != nil {
			return err
		}
		envs = append(envs, env)
		owner := fmt.Sprintf("scheduler-example/%s/%d", host, i+1)
		s, err := newScheduler(env, owner, say)
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

// newScheduler returns a gocron scheduler whose job "report" runs at most
// once per one-second slot across every replica.
func newScheduler(env *exampleenv.Replica, owner string, say func(string, ...any)) (gocron.Scheduler, error) {
	client, err := lease.NewClient(env.Backend, lease.ClientOptions{Owner: owner})
	if err != nil {
		return nil, err
	}
	// docs:begin locker
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	locker, err := leasescheduler.NewLocker(client, leasescheduler.Options{
		Policy: policy,
		// One run per slot: the job runs every second, on the second.
		Slots: leasescheduler.Every(time.Second),
	})
	if err != nil {
		return nil, err
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		return nil, err
	}
	_, err = s.NewJob(
		gocron.CronJob("* * * * * *", true), // every second
		locker.Task("report", func(ctx context.Context, run leasescheduler.Run) error {
			// ctx is cancelled if the lease is lost; fence every write
			// with run.Lease.
			return report(ctx, env, run, owner, say)
		}),
		gocron.WithName("report"), // the name Lock is called with
	)
	// docs:end locker
	if err != nil {
		_ = s.Shutdown()
		return nil, err
	}
	return s, nil
}

// report makes the job's one fenced write.
func report(ctx context.Context, env *exampleenv.Replica, run leasescheduler.Run, owner string, say func(string, ...any)) error {
	if err := env.Add(ctx, run.Lease); err != nil {
		say("%s: slot %s: %v", owner, run.Slot.Start.Format("15:04:05"), err)
		return errors.Join(errors.New("fenced write failed"), err)
	}
	say("%s ran slot %s with token %d", owner, run.Slot.Start.Format("15:04:05"), run.Lease.Token)
	return nil
}
