package leasescheduler

import (
	"context"
	"errors"
	"reflect"

	"github.com/go-co-op/gocron/v2"

	"github.com/golib/lease/lease"
)

// ErrNoLock is returned by a task of Locker.Task that runs without the
// lease of its run: neither its scheduler nor its job uses the Locker
// (gocron.WithDistributedLocker, gocron.WithDistributedJobLocker), or the
// job disabled it (gocron.WithDisabledDistributedJobLocker).
var ErrNoLock = errors.New("leasescheduler: the job runs without its lease")

// ErrUnnamedJob is returned by Locker.Lock for a job that has no name of
// its own: gocron names a job after its function unless given
// gocron.WithName, and every task of Task and Elector.Task has the same
// function, so their runs would share one lease. Name each job with
// gocron.WithName.
var ErrUnnamedJob = errors.New("leasescheduler: the job has no name; give it one with gocron.WithName")

// pkgPath is this package's import path, which starts the gocron names of
// its tasks' functions.
var pkgPath = reflect.TypeFor[Locker]().PkgPath()

// ErrNotLeader is returned by Elector.IsLeader, and by a task of
// Elector.Task, on a replica that does not hold the leadership lease.
var ErrNotLeader = errors.New("leasescheduler: not the leader")

// Run describes one run of a job under a lease.
type Run struct {
	// Job is the job's gocron name, which names its lease; empty in a
	// run of Elector.Task, since gocron does not tell an Elector which
	// job it asks for.
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

// Task returns a gocron.Task that runs fn with the lease that the Locker
// took for the run. The lease is named after the job's gocron name, which
// is written once, with gocron.WithName:
//
//	s.NewJob(def, locker.Task(fn), gocron.WithName("report"))
//
// A job of Task must have a name of its own; without one Lock fails with
// ErrUnnamedJob and gocron skips every run.
//
// The task finds its run's lease by the job context that gocron passes
// both to Lock and to the task's function (gocron v2 passes the job's
// context to each). It fails with ErrNoLock, without calling fn, if the
// Locker took no lease under that context: the job does not use this
// Locker. A run never goes ahead without its lease.
func (l *Locker) Task(fn JobFunc) gocron.Task {
	// A method value, not a closure: its name, gocron's default job name,
	// starts with this package's path wherever Task is inlined, which is
	// how Lock recognises an unnamed job.
	return gocron.NewTask(lockerTask{l, fn}.run)
}

type lockerTask struct {
	l  *Locker
	fn JobFunc
}

func (t lockerTask) run(ctx context.Context) error {
	k, err := t.l.holding(ctx)
	if err != nil {
		return err
	}
	return call(ctx, k.Context(), k.Run(), t.fn)
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
