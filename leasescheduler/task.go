package leasescheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-co-op/gocron/v2"

	"github.com/golib/lease/lease"
)

// ErrNoLock is returned by a task of Locker.Task that runs without the
// lease of its run: its scheduler does not use the Locker, or the job's
// gocron name (gocron.WithName) differs from the name given to Task.
var ErrNoLock = errors.New("leasescheduler: the job runs without its lease")

// ErrNotLeader is returned by Elector.IsLeader, and by a task of
// Elector.Task, on a replica that does not hold the leadership lease.
var ErrNotLeader = errors.New("leasescheduler: not the leader")

// Run describes one run of a job under a lease.
type Run struct {
	// Job is the job's name.
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
// took for the run. Give the job the same name with gocron.WithName, which
// is the name gocron passes to Lock:
//
//	s.NewJob(def, locker.Task("report", fn), gocron.WithName("report"))
//
// The task fails with ErrNoLock, without calling fn, if it finds no lease
// for the name.
func (l *Locker) Task(job string, fn JobFunc) gocron.Task {
	return gocron.NewTask(func(ctx context.Context) error {
		k := l.holding(job)
		if k == nil {
			return fmt.Errorf("%w: job %q", ErrNoLock, job)
		}
		return call(ctx, k.Context(), k.Run(), fn)
	})
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
