package leasescheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/backendenv"
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

// TestTwoSchedulersJobNamedOnce: two gocron schedulers, each with a Locker
// built from zero Options but Slots, run two jobs every second, each job
// named once with gocron.WithName. One scheduler sets the Locker for all
// its jobs, the other per job. Every slot of every job runs exactly once,
// each run gets the lease of its own job (Run.Job is the gocron name), and
// every fenced write under it is accepted while the run is live.
func TestTwoSchedulersJobNamedOnce(t *testing.T) {
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
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			newBackend, f := k.env(t)
			var mu sync.Mutex
			runs := map[string]map[time.Time][]string{"export": {}, "cleanup": {}} // job → slot → replicas
			var problems []string
			job := func(replica, name string) leasescheduler.JobFunc {
				return func(ctx context.Context, run leasescheduler.Run) error {
					ok, err := f.Write(ctx, run.Lease, name)
					mu.Lock()
					defer mu.Unlock()
					if run.Job != name {
						problems = append(problems, fmt.Sprintf("%s: job %s ran with the lease of %q", replica, name, run.Job))
					}
					if err == nil && !ok && ctx.Err() == nil {
						problems = append(problems, fmt.Sprintf("%s: job %s: fenced write refused while the run was live", replica, name))
					}
					runs[name][run.Slot.Start] = append(runs[name][run.Slot.Start], replica)
					return nil
				}
			}
			var ss []gocron.Scheduler
			for i := range 2 {
				replica := fmt.Sprintf("replica-%d", i)
				locker := newLocker(t, newClient(t, newBackend(), replica, nil), leasescheduler.Options{Slots: leasescheduler.Every(time.Second)})
				var sopts []gocron.SchedulerOption
				var jopts []gocron.JobOption
				if i == 0 {
					sopts = append(sopts, gocron.WithDistributedLocker(locker))
				} else {
					jopts = append(jopts, gocron.WithDistributedJobLocker(locker))
				}
				s := newScheduler(t, sopts...)
				for _, name := range []string{"export", "cleanup"} {
					_, err := s.NewJob(gocron.CronJob("* * * * * *", true), locker.Task(job(replica, name)),
						append([]gocron.JobOption{gocron.WithName(name)}, jopts...)...)
					if err != nil {
						t.Fatal(err)
					}
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

// TestUnnamedTaskIsRefused: a job of Task without gocron.WithName gets
// gocron's default name, which is the same for every such job; Lock
// refuses it before any I/O.
func TestUnnamedTaskIsRefused(t *testing.T) {
	b := leasememory.New(leasememory.Options{})
	locker := newLocker(t, newClient(t, b, "a", nil), leasescheduler.Options{})
	s := newScheduler(t, gocron.WithDistributedLocker(locker))
	j, err := s.NewJob(gocron.DurationJob(time.Hour), locker.Task(func(context.Context, leasescheduler.Run) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gocron named the job %q", j.Name())
	if _, err := locker.Lock(context.Background(), j.Name()); !errors.Is(err, leasescheduler.ErrUnnamedJob) {
		t.Fatalf("Lock(%q) = %v, want ErrUnnamedJob", j.Name(), err)
	}
	if r, err := b.Inspect(context.Background(), locker.RunKey(j.Name())); err != nil || r.Token != 0 {
		t.Fatalf("the unnamed job's lease: %+v, %v; want never acquired", r, err)
	}
}

// TestTaskFindsItsRunByTheJobContext: what Task relies on: the Lock taken
// under a job context is found under that context only, until Unlock;
// two Locks under one context are ambiguous, and a task then refuses to
// run rather than guess.
func TestTaskFindsItsRunByTheJobContext(t *testing.T) {
	b := leasememory.New(leasememory.Options{})
	l := newLocker(t, newClient(t, b, "a", nil), leasescheduler.Options{})
	jobCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	other, cancelOther := context.WithCancel(context.Background())
	defer cancelOther()

	k, err := l.Lock(jobCtx, "export")
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Holding(jobCtx)
	if err != nil || got != k || got.Run().Job != "export" {
		t.Fatalf("Holding(job context) = %v, %v; want the Lock of export", got, err)
	}
	if _, err := l.Holding(other); !errors.Is(err, leasescheduler.ErrNoLock) {
		t.Fatalf("Holding(another context) = %v, want ErrNoLock", err)
	}
	k2, err := l.Lock(jobCtx, "cleanup")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Holding(jobCtx); !errors.Is(err, leasescheduler.ErrNoLock) {
		t.Fatalf("Holding with two Locks under one context = %v, want ErrNoLock", err)
	}
	if err := k2.Unlock(jobCtx); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Holding(jobCtx); err != nil || got != k {
		t.Fatalf("after the second Unlock: %v, %v; want the first Lock", got, err)
	}
	if err := k.Unlock(jobCtx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Holding(jobCtx); !errors.Is(err, leasescheduler.ErrNoLock) {
		t.Fatalf("Holding after Unlock = %v, want ErrNoLock", err)
	}
	var nilCtx context.Context
	if _, err := l.Holding(nilCtx); !errors.Is(err, leasescheduler.ErrNoLock) {
		t.Fatalf("Holding(nil) = %v, want ErrNoLock", err)
	}
}
