package leasescheduler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler"
	"github.com/golib/lease/leasescheduler/jobevent"
)

// events collects job events.
type events struct {
	mu sync.Mutex
	es []jobevent.Event
}

func (e *events) Observe(ev jobevent.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.es = append(e.es, ev)
}

// take returns the events so far and forgets them.
func (e *events) take() []jobevent.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	es := e.es
	e.es = nil
	return es
}

// one returns the only event so far other than Added, failing unless
// there is exactly one.
func (e *events) one(t *testing.T) jobevent.Event {
	t.Helper()
	var es []jobevent.Event
	for _, ev := range e.take() {
		if _, ok := ev.(*jobevent.Added); !ok {
			es = append(es, ev)
		}
	}
	if len(es) != 1 {
		t.Fatalf("%d events %v, want 1", len(es), es)
	}
	return es[0]
}

// brokenAcquire fails every acquisition with an error that is not a
// refusal: the backend is unreachable.
type brokenAcquire struct{ lease.Backend }

func (brokenAcquire) Acquire(context.Context, lease.AcquireRequest) (lease.Token, error) {
	return 0, errors.New("connection refused")
}

// TestJobEvents checks what each way of running a job reports: runs that
// ended ok, failed, lost their lease or were not checked, and runs that
// did not start because another replica had them or the backend failed.
func TestJobEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := leasememory.New(leasememory.Options{})
	p := newPolicy(t, lease.PolicyOptions{TTL: 300 * time.Millisecond})
	var obs events
	l := newLocker(t, newClient(t, b, "a", nil), leasescheduler.Options{Policy: p, Observer: &obs})
	other := newLocker(t, newClient(t, b, "b", nil), leasescheduler.Options{Policy: p})

	// Building a job adds it, before any run.
	l.CronJob("added", func(context.Context, leasescheduler.Run) error { return nil }, nil)
	l.Job("added too", func(context.Context, leasescheduler.Run) error { return nil })
	if es := obs.take(); len(es) != 2 || es[0].Info().Job != "added" || es[1].Info().Job != "added too" {
		t.Fatalf("events of building two jobs: %v, want two Added", es)
	} else if _, ok := es[0].(*jobevent.Added); !ok {
		t.Fatalf("event of building a job: %T, want *jobevent.Added", es[0])
	}

	// robfig/cron: ok, failed.
	l.CronJob("report", func(context.Context, leasescheduler.Run) error { return nil }, nil).Run()
	r, ok := obs.one(t).(*jobevent.Ran)
	if !ok || r.Job != "report" || r.Result != jobevent.OK || r.Token == 0 || r.Err != nil || r.Start.IsZero() || r.End.Before(r.Start) {
		t.Fatalf("ok run: %+v", r)
	}
	l.CronJob("report", func(context.Context, leasescheduler.Run) error { return errors.New("disk full") }, nil).Run()
	if r, ok := obs.one(t).(*jobevent.Ran); !ok || r.Result != jobevent.Failed || r.Err == nil || r.Err.Error() != "disk full" {
		t.Fatalf("failed run: %+v", r)
	}

	// Lost: the run's lease is released by force while the job runs; the
	// job sees its context end, and returns nil all the same.
	l.CronJob("report", func(ctx context.Context, run leasescheduler.Run) error {
		if _, err := b.ForceRelease(ctx, l.RunKey("report"), run.Lease.Token); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}, nil).Run()
	if r, ok := obs.one(t).(*jobevent.Ran); !ok || r.Result != jobevent.Lost || !errors.Is(r.Err, lease.ErrLost) {
		t.Fatalf("lost run: %+v", r)
	}

	// Skipped: another replica runs the job.
	held, err := other.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	l.CronJob("report", func(context.Context, leasescheduler.Run) error { return nil }, nil).Run()
	if e, ok := obs.one(t).(*jobevent.NotRun); !ok || e.Job != "report" || e.Result != jobevent.Skipped || !errors.Is(e.Err, lease.ErrNotAcquired) {
		t.Fatalf("skipped run: %+v", e)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A plain gocron task: the Locker sees the lock and the unlock only.
	k, err := l.Lock(ctx, "cleanup")
	if err != nil {
		t.Fatal(err)
	}
	if es := obs.take(); len(es) != 0 {
		t.Fatalf("events before Unlock: %v", es)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	_ = k.Unlock(ctx) // reported once
	if r, ok := obs.one(t).(*jobevent.Ran); !ok || r.Job != "cleanup" || r.Result != jobevent.Unchecked {
		t.Fatalf("plain task's run: %+v", r)
	}

	// Locker.Job: the task reports the run, the unlock adds nothing; a
	// task run without its lock is an error.
	_, jobLocker := l.Job("nightly", func(context.Context, leasescheduler.Run) error { return nil })
	k, err = jobLocker.Lock(ctx, "gocron's name")
	if err != nil {
		t.Fatal(err)
	}
	if err := leasescheduler.RunJobTask(ctx, jobLocker); err != nil {
		t.Fatal(err)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if r, ok := obs.one(t).(*jobevent.Ran); !ok || r.Job != "nightly" || r.Result != jobevent.OK {
		t.Fatalf("Locker.Job's run: %+v", r)
	}
	if err := leasescheduler.RunJobTask(ctx, jobLocker); !errors.Is(err, leasescheduler.ErrNoLock) {
		t.Fatalf("task without its lock = %v, want ErrNoLock", err)
	}
	if e, ok := obs.one(t).(*jobevent.NotRun); !ok || e.Job != "nightly" || e.Result != jobevent.Error {
		t.Fatalf("run without its lock: %+v", e)
	}

	// Error: the backend fails.
	broken := newLocker(t, newClient(t, brokenAcquire{b}, "c", nil), leasescheduler.Options{Policy: p, Observer: &obs})
	broken.CronJob("report", func(context.Context, leasescheduler.Run) error { return nil }, nil).Run()
	if e, ok := obs.one(t).(*jobevent.NotRun); !ok || e.Result != jobevent.Error || errors.Is(e.Err, lease.ErrNotAcquired) {
		t.Fatalf("run on a broken backend: %+v", e)
	}
}

// TestElectorJobEvents: the leader's runs of Elector.Job are reported
// under the job's name; a replica that does not lead reports a skip.
func TestElectorJobEvents(t *testing.T) {
	t.Parallel()
	b := leasememory.New(leasememory.Options{})
	p := newPolicy(t, lease.PolicyOptions{TTL: time.Second})
	var obs events
	e, err := leasescheduler.NewElector(newClient(t, b, "a", nil), "jobs/leader", p, leasescheduler.ElectorOptions{Observer: &obs})
	if err != nil {
		t.Fatal(err)
	}
	job := func(_ context.Context, run leasescheduler.Run) error {
		if run.Job != "nightly" {
			return errors.New("run without the job's name")
		}
		return nil
	}
	e.Job("nightly", job)
	if ev, ok := obs.take()[0].(*jobevent.Added); !ok || ev.Job != "nightly" {
		t.Fatalf("Elector.Job's event: %+v, want Added", ev)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := leasescheduler.RunElectorJob(ctx, e, "nightly", job); !errors.Is(err, leasescheduler.ErrNotLeader) {
		t.Fatalf("task before the election = %v, want ErrNotLeader", err)
	}
	if ev, ok := obs.one(t).(*jobevent.NotRun); !ok || ev.Job != "nightly" || ev.Result != jobevent.Skipped {
		t.Fatalf("run on a replica that does not lead: %+v", ev)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for e.IsLeader(ctx) != nil {
		time.Sleep(5 * time.Millisecond)
	}
	if err := leasescheduler.RunElectorJob(ctx, e, "nightly", job); err != nil {
		t.Fatal(err)
	}
	if r, ok := obs.one(t).(*jobevent.Ran); !ok || r.Job != "nightly" || r.Result != jobevent.OK || r.Token == 0 {
		t.Fatalf("leader's run: %+v", r)
	}
}
