package leasescheduler

import (
	"context"
	"errors"
	"time"

	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler/jobevent"
)

// ErrNoLock is returned by a task of Locker.Job that runs without the
// lease of its run: the job was not given the locker that Locker.Job
// returned with the task (gocron.WithDistributedJobLocker), the job
// disabled it (gocron.WithDisabledDistributedJobLocker), or the scheduler
// has an Elector.
var ErrNoLock = errors.New("leasescheduler: the job runs without its lease")

// ErrNotLeader is returned by Elector.IsLeader, and by a task of
// Elector.Task, on a replica that does not hold the leadership lease.
var ErrNotLeader = errors.New("leasescheduler: not the leader")

// Run describes one run of a job under a lease.
type Run struct {
	// Job is the job's name, which names its lease: the name given to
	// Locker.Job or Locker.CronJob, or the key gocron passed to
	// Locker.Lock. Empty in a run of Elector.Task, since gocron does not
	// tell an Elector which job it asks for.
	Job string
	// Lease is the run's lease (a Locker's) or the leader's (an
	// Elector's). Pass Lease.Token to every write the job makes.
	Lease lease.Snapshot
	// Slot is the slot the run belongs to; the zero Slot without
	// Options.Slots.
	Slot Slot
}

// A JobFunc is a job that uses its lease. ctx is cancelled when the lease
// is lost (with a cause wrapping lease.ErrLost) or the scheduler stops the
// job.
type JobFunc func(ctx context.Context, run Run) error

// ran is the event of a run of job under the lease with token that ended
// at end: lost is the lease's loss during the run, if any, and err the
// job's error, if checked (a plain gocron task's result is not seen).
func ran(job string, token lease.Token, lost, err error, checked bool, start, end time.Time) *jobevent.Ran {
	e := &jobevent.Ran{EventInfo: jobevent.EventInfo{Job: job, Token: token}, Result: jobevent.OK, Start: start, End: end}
	switch {
	case lost != nil:
		e.Result, e.Err = jobevent.Lost, lost
	case !checked:
		e.Result = jobevent.Unchecked
	case err != nil:
		e.Result, e.Err = jobevent.Failed, err
	}
	return e
}

// notRun is the event of a run of job that did not start at at because
// of err: Skipped if another replica has it, Error otherwise.
func notRun(job string, err error, at time.Time) *jobevent.NotRun {
	r := jobevent.Error
	if errors.Is(err, lease.ErrNotAcquired) || errors.Is(err, ErrNotLeader) {
		r = jobevent.Skipped
	}
	return &jobevent.NotRun{EventInfo: jobevent.EventInfo{Job: job, Err: err}, Result: r, At: at}
}

// call runs fn with a context that ends when ctx or leaseCtx does, with
// the cause of the first to end.
func call(ctx, leaseCtx context.Context, run Run, fn JobFunc) error {
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(leaseCtx, func() { cancel(context.Cause(leaseCtx)) })
	defer stop()
	return fn(jctx, run)
}
