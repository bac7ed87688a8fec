// Command leader runs a singleton worker on exactly one of several
// replicas with package leaseservice: the replicas campaign for one lease,
// the holder works (a fenced counter increment every 100ms) until it steps
// down or loses the lease, and a waiting replica takes over as soon as the
// lease is released.
//
//	go run ./examples/leader                                  # three replicas, memory backend
//	go run ./examples/leader -valkey 127.0.0.1:6379           # each replica its own connection
//	go run ./examples/leader -postgres postgres://localhost/app
//
// With -replicas 1 in several terminals, the replicas are separate
// processes; stop the leader with Ctrl-C and watch another take over.
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

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseservice"
)

type config struct {
	valkeyAddr  string
	postgresURL string
	replicas    int
	// duration ends the program; 0 runs until interrupted.
	duration time.Duration
	// term is how long a leader works before it steps down, to show
	// hand-overs; 0 works until the lease is lost or the program stops.
	term time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.valkeyAddr, "valkey", "", "Valkey address (host:port)")
	flag.StringVar(&cfg.postgresURL, "postgres", "", "PostgreSQL URL")
	flag.IntVar(&cfg.replicas, "replicas", 3, "replicas to run in this process")
	flag.DurationVar(&cfg.duration, "duration", 0, "stop after this long (default: at Ctrl-C)")
	flag.DurationVar(&cfg.term, "term", 3*time.Second, "step down after leading this long (0: never)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if cfg.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.duration)
		defer cancel()
	}
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(1)
	}
}

// run runs cfg.replicas replicas until ctx ends.
func run(ctx context.Context, cfg config, out io.Writer) error {
	// Each replica gets a lease backend on a connection of its own and a
	// fenced counter to write to (backend.go).
	backend := backendOptions{ValkeyAddr: cfg.valkeyAddr, PostgresURL: cfg.postgresURL, Prefix: "example:"}
	open, err := dial(ctx, backend)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	p := printer{w: out, start: time.Now()}
	p.say("%d replica(s) on %s", cfg.replicas, backend.describe())
	var wg sync.WaitGroup
	errs := make([]error, cfg.replicas)
	for i := range cfg.replicas {
		env, err := open()
		if err != nil {
			return err
		}
		defer env.close()
		owner := fmt.Sprintf("leader-example/%s/%d", host, i+1)
		wg.Go(func() { errs[i] = replica(ctx, cfg, env, owner, &p) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// replica campaigns, works while it leads, and campaigns again.
func replica(ctx context.Context, cfg config, env *replicaEnv, owner string, p *printer) error {
	client, err := lease.NewClient(env.backend, lease.ClientOptions{Owner: owner})
	if err != nil {
		return err
	}
	// docs:begin run
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	if err != nil {
		return err
	}
	svc, err := leaseservice.New(client, "examples/leader", policy,
		func(ctx context.Context, h *lease.Handle) error {
			// ctx is cancelled the moment the lease is lost, or at shutdown.
			return work(ctx, cfg.term, env, h.Snapshot(), owner, p)
		},
		leaseservice.Options{
			Rest: time.Second, // after stepping down, let another replica lead
			OnTransition: func(tr leaseservice.Transition) {
				p.transition(owner, tr)
			},
		})
	if err != nil {
		return err
	}
	// Campaign, lead, release, campaign again... until ctx ends. Run
	// returns after the function has returned and the lease was released.
	return svc.Run(ctx)
	// docs:end run
}

// work increments the fenced counter every 100ms until ctx ends or term
// has passed.
func work(ctx context.Context, term time.Duration, env *replicaEnv, snap lease.Snapshot, owner string, p *printer) error {
	var until <-chan time.Time
	if term > 0 {
		until = time.After(term)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	writes := 0
	for {
		select {
		case <-ctx.Done():
			p.say("%s stops working after %d fenced writes: %v", owner, writes, context.Cause(ctx))
			return nil
		case <-until:
			p.say("%s steps down after %d fenced writes", owner, writes)
			return nil
		case <-tick.C:
		}
		// docs:begin write
		err := env.add(ctx, snap)
		if errors.Is(err, fence.ErrStale) {
			// A newer holder has written: this one must stop at once.
			return err
		}
		// docs:end write
		if err != nil && ctx.Err() == nil {
			return err
		}
		writes++
	}
}

// printer writes timestamped lines, and the time each hand-over took.
type printer struct {
	w     io.Writer
	start time.Time

	mu       sync.Mutex
	released time.Time
}

func (p *printer) say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%6.3fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

func (p *printer) transition(owner string, tr leaseservice.Transition) {
	switch tr.Kind {
	case leaseservice.Elected:
		p.mu.Lock()
		since := time.Since(p.released)
		handOver := !p.released.IsZero()
		p.mu.Unlock()
		if handOver {
			p.say("%s elected with token %d, %v after the release", owner, tr.Token, since.Round(time.Microsecond))
		} else {
			p.say("%s elected with token %d", owner, tr.Token)
		}
	case leaseservice.Released:
		p.mu.Lock()
		p.released = time.Now()
		p.mu.Unlock()
		if tr.Err != nil {
			p.say("%s's release failed: %v", owner, tr.Err)
		} else {
			p.say("%s released the lease", owner)
		}
	case leaseservice.Lost:
		p.say("%s LOST the lease: %v", owner, tr.Err)
	}
}
