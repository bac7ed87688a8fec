package leasescheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/testkit/backendenv"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler"
)

// memFence is a backendenv.Fence on fence.Memory, for the memory backend.
type memFence struct{ m fence.Memory }

func (f *memFence) Write(_ context.Context, snap lease.Snapshot, resource string) (bool, error) {
	err := f.m.Do(snap, []string{resource}, func() error { return nil })
	if errors.Is(err, fence.ErrStale) {
		return false, nil
	}
	return err == nil, err
}

// TestTwoSchedulersJobsAndPlainTasks: two gocron schedulers, each with a
// Locker built from zero Options but Slots, run two jobs every second: a
// job of Locker.Job ("export", named once, in Locker.Job) and a plain
// gocron task ("cleanup", named with gocron.WithName) locked by the
// Locker itself. One scheduler sets the Locker for all its jobs, and
// export's own locker takes precedence over it there, as gocron's README
// says a job's locker does; the other sets a locker per job. Every slot of
// every job runs exactly once, each run of export gets the lease of export,
// and every fenced write under it is accepted while the run is live.
func TestTwoSchedulersJobsAndPlainTasks(t *testing.T) {
	t.Parallel()
	type kind struct {
		name string
		env  func(t *testing.T) (func() lease.Backend, backendenv.Fence)
	}
	kinds := []kind{{"memory", func(t *testing.T) (func() lease.Backend, backendenv.Fence) {
		b := leasememory.New(leasememory.Options{})
		return func() lease.Backend { return b }, &memFence{}
	}}}
	for _, k := range backendenv.Kinds {
		kinds = append(kinds, kind{k.Name, func(t *testing.T) (func() lease.Backend, backendenv.Fence) {
			env := k.Env(t)
			return func() lease.Backend { return env.NewBackend(t, env.Addr) }, env.Fence
		}})
	}
	const slots = 8
	every := leasescheduler.Every(time.Second)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			newBackend, f := k.env(t)
			var mu sync.Mutex
			runs := map[string]map[time.Time][]string{"export": {}, "cleanup": {}} // job → slot → replicas
			var problems []string
			export := func(replica string) leasescheduler.JobFunc {
				return func(ctx context.Context, run leasescheduler.Run) error {
					ok, err := f.Write(ctx, run.Lease, "export")
					mu.Lock()
					defer mu.Unlock()
					if run.Job != "export" {
						problems = append(problems, fmt.Sprintf("%s: job export ran with the lease of %q", replica, run.Job))
					}
					if err == nil && !ok && ctx.Err() == nil {
						problems = append(problems, fmt.Sprintf("%s: job export: fenced write refused while the run was live", replica))
					}
					runs["export"][run.Slot.Start] = append(runs["export"][run.Slot.Start], replica)
					return nil
				}
			}
			cleanup := func(replica string) func() {
				return func() {
					// The Locker took the slot a moment ago, on this clock.
					s, _ := every("cleanup", time.Now())
					mu.Lock()
					defer mu.Unlock()
					runs["cleanup"][s.Start] = append(runs["cleanup"][s.Start], replica)
				}
			}
			var ss []gocron.Scheduler
			for i := range 2 {
				replica := fmt.Sprintf("replica-%d", i)
				locker := newLocker(t, newClient(t, newBackend(), replica, nil), leasescheduler.Options{Slots: every})
				var sopts []gocron.SchedulerOption
				var cleanupOpts []gocron.JobOption
				if i == 0 {
					sopts = append(sopts, gocron.WithDistributedLocker(locker))
				} else {
					cleanupOpts = append(cleanupOpts, gocron.WithDistributedJobLocker(locker))
				}
				s := newScheduler(t, sopts...)
				task, jobLocker := locker.Job("export", export(replica))
				if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), task, gocron.WithDistributedJobLocker(jobLocker)); err != nil {
					t.Fatal(err)
				}
				_, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(cleanup(replica)),
					append([]gocron.JobOption{gocron.WithName("cleanup")}, cleanupOpts...)...)
				if err != nil {
					t.Fatal(err)
				}
				ss = append(ss, s)
			}
			for _, s := range ss {
				s.Start()
			}
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				mu.Lock()
				n := min(len(runs["export"]), len(runs["cleanup"]))
				mu.Unlock()
				if n >= slots {
					break
				}
			}
			shutdown(t, ss)
			mu.Lock()
			defer mu.Unlock()
			for _, p := range problems {
				t.Error(p)
			}
			for name, bySlot := range runs {
				if len(bySlot) < slots {
					t.Errorf("job %s: %d slots ran, want at least %d", name, len(bySlot), slots)
				}
				counts := map[int]int{}
				for start, rs := range bySlot {
					counts[len(rs)]++
					if len(rs) != 1 {
						t.Errorf("job %s: slot %s ran %d times: %v", name, start.Format("15:04:05"), len(rs), rs)
					}
				}
				t.Logf("%s: job %s: slots by number of runs: %v", k.name, name, counts)
			}
		})
	}
}

// TestJobsNeedNoGocronName: two jobs of Locker.Job without
// gocron.WithName have the same gocron name (their tasks share one
// function), on a scheduler whose Locker would lock every job by that name;
// each job's own locker names its leases after the Job instead, so both
// jobs run in every slot, each under its own lease.
func TestJobsNeedNoGocronName(t *testing.T) {
	t.Parallel()
	b := leasememory.New(leasememory.Options{})
	locker := newLocker(t, newClient(t, b, "a", nil), leasescheduler.Options{Slots: leasescheduler.Every(time.Second)})
	s := newScheduler(t, gocron.WithDistributedLocker(locker))
	var mu sync.Mutex
	runs := map[string]map[time.Time]lease.Token{"a": {}, "b": {}}
	var names []string
	for _, name := range []string{"a", "b"} {
		task, jobLocker := locker.Job(name, func(_ context.Context, run leasescheduler.Run) error {
			mu.Lock()
			defer mu.Unlock()
			runs[run.Job][run.Slot.Start] = run.Lease.Token
			return nil
		})
		j, err := s.NewJob(gocron.CronJob("* * * * * *", true), task, gocron.WithDistributedJobLocker(jobLocker))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, j.Name())
	}
	t.Logf("gocron named the jobs %q", names)
	s.Start()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := min(len(runs["a"]), len(runs["b"]))
		mu.Unlock()
		if n >= 3 {
			break
		}
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs["a"]) < 3 || len(runs["b"]) < 3 {
		t.Fatalf("slots run: a %d, b %d; want both jobs in every slot", len(runs["a"]), len(runs["b"]))
	}
	for _, name := range []string{"a", "b"} {
		if r, err := b.Inspect(context.Background(), locker.RunKey(name)); err != nil || r.Token == 0 {
			t.Errorf("the lease of job %s: %+v, %v; want acquired", name, r, err)
		}
	}
}

// TestJobRunsOnlyWithItsOwnLock: the task of Locker.Job refuses to run,
// with ErrNoLock, when gocron did not lock the run with the job's own
// locker: a scheduler with no locker, a job that disabled it, a
// scheduler with an Elector.
func TestJobRunsOnlyWithItsOwnLock(t *testing.T) {
	t.Parallel()
	locker := newLocker(t, newClient(t, leasememory.New(leasememory.Options{}), "a", nil), leasescheduler.Options{})
	for _, c := range []struct {
		name  string
		sopts []gocron.SchedulerOption
		jopts func(jobLocker gocron.Locker) []gocron.JobOption
	}{
		{"no locker", nil, func(gocron.Locker) []gocron.JobOption { return nil }},
		{"the scheduler's Locker only", []gocron.SchedulerOption{gocron.WithDistributedLocker(locker)},
			func(gocron.Locker) []gocron.JobOption { return nil }},
		{"disabled", nil, func(jl gocron.Locker) []gocron.JobOption {
			return []gocron.JobOption{gocron.WithDistributedJobLocker(jl), gocron.WithDisabledDistributedJobLocker(true)}
		}},
		{"elector", []gocron.SchedulerOption{gocron.WithDistributedElector(leader{})}, func(jl gocron.Locker) []gocron.JobOption {
			return []gocron.JobOption{gocron.WithDistributedJobLocker(jl)}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScheduler(t, c.sopts...)
			task, jobLocker := locker.Job("report", func(context.Context, leasescheduler.Run) error {
				t.Error("the job ran without its lease")
				return nil
			})
			failed := make(chan error, 1)
			opts := append(c.jopts(jobLocker), gocron.WithEventListeners(gocron.AfterJobRunsWithError(func(_ uuid.UUID, _ string, err error) {
				failed <- err
			})))
			if _, err := s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()), task, opts...); err != nil {
				t.Fatal(err)
			}
			s.Start()
			select {
			case err := <-failed:
				if !errors.Is(err, leasescheduler.ErrNoLock) {
					t.Fatalf("the run failed with %v, want ErrNoLock", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the run did not fail")
			}
		})
	}
}

// leader is a gocron.Elector that always leads.
type leader struct{}

func (leader) IsLeader(context.Context) error { return nil }
