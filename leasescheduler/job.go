package leasescheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/go-co-op/gocron/v2"

	"github.com/golib/lease/leasescheduler/jobevent"
)

// Job returns the two halves of a gocron job that runs fn under the leases
// of the Locker: the job's task, and the job's own gocron.Locker, to be
// given to the job with gocron.WithDistributedJobLocker. The run's leases
// are named after name, whatever gocron calls the job:
//
//	task, jobLocker := locker.Job("report", fn)
//	s.NewJob(def, task, gocron.WithDistributedJobLocker(jobLocker))
//
// gocron locks each run of the job with jobLocker (a job's own locker takes
// precedence over the scheduler's) and holds the lock for the duration of
// the run; jobLocker takes the run's leases as Lock does, and the task
// runs fn with them. If the run has no lease of jobLocker (the job was
// given another locker, or gocron.WithDisabledDistributedJobLocker, or the
// scheduler has an Elector, with which gocron v2.21 asks no locker), the
// task fails with ErrNoLock and does not call fn: a run never goes ahead
// without its lease. Give jobLocker to this job only.
//
// An empty name makes every run fail, before any I/O.
func (l *Locker) Job(name string, fn JobFunc) (gocron.Task, gocron.Locker) {
	l.o.Observer.Observe(&jobevent.Added{EventInfo: jobevent.EventInfo{Job: name}})
	j := &jobLocker{l: l, name: name, fn: fn}
	return gocron.NewTask(j.run), j
}

// jobLocker is the locker of Locker.Job: its Lock takes the run's leases,
// and its run, the job's task, finds them.
type jobLocker struct {
	l    *Locker
	name string
	fn   JobFunc

	mu   sync.Mutex
	held []*Lock // taken by Lock and not yet unlocked
}

// Lock implements gocron.Locker: it takes the leases of a run of the job.
// key, gocron's name for the job, does not name them: j.name does.
func (j *jobLocker) Lock(ctx context.Context, _ string) (gocron.Lock, error) {
	k, err := j.l.lock(ctx, j.name)
	if err != nil {
		return nil, err
	}
	k.owner = j
	j.mu.Lock()
	j.held = append(j.held, k)
	j.mu.Unlock()
	return k, nil
}

// run is the job's task: it runs fn with the lease that Lock took for the
// run.
func (j *jobLocker) run(ctx context.Context) error {
	k, err := j.claim()
	if err != nil {
		j.l.o.Observer.Observe(notRun(j.name, err, j.l.o.Clock.Now()))
		return err
	}
	err = call(ctx, k.Context(), k.Run(), j.fn)
	k.report(err, true)
	return err
}

// claim returns the Lock taken for the run that is starting: the one Lock
// held that no run has claimed. There are two only when an earlier run's
// lease was lost and the next run locked before the earlier one ended; the
// earlier run then claimed its own already.
func (j *jobLocker) claim() (*Lock, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var free []*Lock
	for _, k := range j.held {
		if !k.claimed {
			free = append(free, k)
		}
	}
	switch len(free) {
	case 0:
		return nil, fmt.Errorf("%w: job %q: its locker took no lease for this run; give the job gocron.WithDistributedJobLocker with the locker that Locker.Job returned with this task", ErrNoLock, j.name)
	case 1:
		free[0].claimed = true
		return free[0], nil
	default:
		return nil, fmt.Errorf("%w: job %q: %d leases are waiting for a run, so this run's is not known", ErrNoLock, j.name, len(free))
	}
}

// forget drops k, which Unlock released.
func (j *jobLocker) forget(k *Lock) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.held = slices.DeleteFunc(j.held, func(x *Lock) bool { return x == k })
}
