package leasescheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseprom"
	"github.com/golib/lease/leasescheduler"
	"github.com/golib/lease/leaseservice"
	"github.com/golib/lease/leasetest"
)

// Two replicas lock the same job in the same one-minute slot, one after the
// other: only the first runs it, although it unlocked at once. The next
// slot runs again.
func ExampleLocker() {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	backend := leasememory.New(leasememory.Options{Clock: clock})
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	replica := func(owner string) *leasescheduler.Locker {
		client, _ := lease.NewClient(backend, lease.ClientOptions{Owner: owner, Clock: clock})
		l, _ := leasescheduler.NewLocker(client, leasescheduler.Options{
			Policy: policy,
			Slots:  leasescheduler.Every(time.Minute), // on the client's clock
		})
		return l
	}
	a, b := replica("replica-a"), replica("replica-b")
	ctx := context.Background()

	run := func(name string, l *leasescheduler.Locker) {
		k, err := l.Lock(ctx, "report")
		if errors.Is(err, lease.ErrNotAcquired) {
			fmt.Printf("%s at %s: skipped\n", name, clock.Now().Format("15:04:05.000"))
			return
		}
		r := k.(*leasescheduler.Lock).Run()
		fmt.Printf("%s at %s: runs the slot of %s\n", name, clock.Now().Format("15:04:05.000"), r.Slot.Start.Format("15:04"))
		_ = k.Unlock(ctx)
	}
	run("a", a)
	clock.Advance(5 * time.Millisecond) // b's timer fires 5ms later
	run("b", b)
	clock.Advance(time.Minute)
	run("b", b)
	run("a", a)
	// Output:
	// a at 10:00:00.000: runs the slot of 10:00
	// b at 10:00:00.005: skipped
	// b at 10:01:00.005: runs the slot of 10:01
	// a at 10:01:00.005: skipped
}

// A gocron scheduler that runs a job on one replica per five-minute slot,
// with a context cancelled if the lease is lost and the token for fenced
// writes. The job's name is written once, in Job: it names the lease.
func ExampleLocker_Job() {
	var client *lease.Client // lease.NewClient on a Valkey or PostgreSQL backend
	locker, err := leasescheduler.NewLocker(client, leasescheduler.Options{
		Slots: leasescheduler.Every(5 * time.Minute),
	})
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler()
	if err != nil {
		log.Fatal(err)
	}
	task, jobLocker := locker.Job("report", func(ctx context.Context, run leasescheduler.Run) error {
		// Write under run.Lease (its Token) with package fence.
		return nil
	})
	_, err = s.NewJob(gocron.CronJob("*/5 * * * *", false), task,
		gocron.WithDistributedJobLocker(jobLocker)) // gocron locks each run with the job's own locker
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	defer s.Shutdown()
}

// A plain gocron task, with the Locker as the scheduler's locker: the
// lease is named after the job's gocron name.
func ExampleLocker_Lock() {
	var locker *leasescheduler.Locker // from NewLocker
	// docs:begin plain
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.NewJob(gocron.DurationJob(time.Hour), gocron.NewTask(cleanup),
		gocron.WithName("cleanup")) // names the lease: jobs/run/cleanup
	// docs:end plain
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	defer s.Shutdown()
}

// A robfig/cron scheduler, with the same locking around its jobs.
func ExampleLocker_CronJob() {
	var locker *leasescheduler.Locker // from NewLocker, as for gocron
	// docs:begin cron
	c := cron.New(cron.WithSeconds())
	// A job that uses its lease: ctx is cancelled on loss, run.Lease fences.
	_, err := c.AddJob("0 */5 * * * *", locker.CronJob("report",
		func(ctx context.Context, run leasescheduler.Run) error {
			return nil
		}, cron.DefaultLogger))
	if err != nil {
		log.Fatal(err)
	}
	// A job that doesn't: wrap it.
	_, err = c.AddJob("0 0 * * * *",
		cron.NewChain(locker.CronWrapper("cleanup", cron.DefaultLogger)).Then(cron.FuncJob(cleanup)))
	if err != nil {
		log.Fatal(err)
	}
	c.Start()
	defer func() { <-c.Stop().Done() }()
	// docs:end cron
}

func cleanup() {}

// A Locker whose runs are counted by package leaseprom: runs by result
// and the time of the last success, per job.
func ExampleOptions_observer() {
	var client *lease.Client // lease.NewClient on a Valkey or PostgreSQL backend
	// docs:begin metrics
	metrics := leaseprom.New(leaseprom.Options{})
	prometheus.MustRegister(metrics)
	locker, err := leasescheduler.NewLocker(client, leasescheduler.Options{
		Slots:    leasescheduler.Every(24 * time.Hour),
		Observer: metrics.Jobs(), // lease_job_runs_total, lease_job_last_success_timestamp_seconds
	})
	// docs:end metrics
	if err != nil {
		log.Fatal(err)
	}
	_ = locker
}

// An Elector: one replica leads and runs every job of its scheduler.
func ExampleElector() {
	var (
		client *lease.Client
		ctx    context.Context
	)
	// docs:begin elector
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 15 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	elector, err := leasescheduler.NewElector(client, "jobs/leader", policy, leasescheduler.ElectorOptions{})
	if err != nil {
		log.Fatal(err)
	}
	go elector.Run(ctx) // campaigns until ctx ends, then releases
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.NewJob(gocron.DurationJob(time.Minute),
		elector.Task(func(ctx context.Context, run leasescheduler.Run) error {
			// Runs on the leader only; ctx ends if leadership is lost.
			return nil
		}))
	// docs:end elector
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	// docs:begin elector-health
	http.Handle("/healthz", leaseservice.HealthHandler(elector.Check))
	// docs:end elector-health
}
