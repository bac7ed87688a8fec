package leasescheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler/jobevent"
)

// DefaultPrefix starts the lease keys of a Locker whose Options.Prefix is
// empty.
const DefaultPrefix = "jobs/"

// DefaultTTL is the TTL of a run's lease when Options.Policy is the zero
// Policy.
const DefaultTTL = 30 * time.Second

// Options configure a Locker. The zero value is valid: runs hold a lease
// of DefaultTTL under DefaultPrefix, and the only promise is that a job never
// runs on two replicas at once (set Slots for once per scheduled time).
type Options struct {
	// Policy is the policy of each run's lease: its TTL bounds how long a
	// crashed replica keeps a job from running elsewhere, and its
	// OperationTimeout bounds Lock. Only TTL-related fields matter: Lock
	// never waits, whatever Wait says. Default lease.NewPolicy with a TTL
	// of DefaultTTL and the other fields at their defaults.
	Policy lease.Policy

	// Prefix starts every lease key: a run's lease is Prefix + "run/" +
	// job, a slot's Prefix + "slot/" + n + "/" + job with n 0, 1 or 2,
	// where '%', '{', '}' and '/' of job are written as %25, %7B, %7D and
	// %2F, so that no two jobs share a lease. Default DefaultPrefix.
	Prefix string

	// Slots, if set, runs each job at most once per scheduled slot (see the
	// package documentation); Every builds one. Default nil: the only promise
	// is that a job never runs on two replicas at once, so a job faster than
	// the spread of the replicas' timers runs once per replica per tick.
	Slots SlotFunc

	// Clock tells the time that Slots maps to a slot, and the times of
	// the Observer's events. Default the client's clock
	// (lease.Client.Clock), which also times the slot's lease.
	Clock lease.Clock

	// Observer receives an event for every run of a job that the Locker
	// takes part in: what it came to (ok, failed, lost, skipped because
	// another replica has it, ...), and when. leaseprom.Metrics.Jobs and
	// leaseotel.Telemetry.Jobs count them. Default nil: no events.
	Observer jobevent.Observer
}

// A Locker takes a lease for each run of a scheduled job, so that a job
// runs on one replica at a time, and with Options.Slots once per slot. It
// implements gocron.Locker: pass it to gocron.WithDistributedLocker (every
// job of the scheduler) or gocron.WithDistributedJobLocker (one job). The
// lease is named after the job's gocron name, which gocron passes to Lock.
// For a job that uses its lease, Job returns the task and a locker of the
// job's own; CronJob and CronWrapper do the same for robfig/cron.
// Its methods are safe for concurrent use.
type Locker struct {
	client *lease.Client
	o      Options
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker that takes leases with client. It validates
// its arguments and does no I/O.
func NewLocker(client *lease.Client, o Options) (*Locker, error) {
	if client == nil {
		return nil, errors.New("leasescheduler: nil Client")
	}
	if o.Policy.TTL() == 0 {
		p, err := lease.NewPolicy(lease.PolicyOptions{TTL: DefaultTTL})
		if err != nil {
			return nil, fmt.Errorf("leasescheduler: default policy: %w", err)
		}
		o.Policy = p
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if err := lease.ValidateKey(o.Prefix + "slot/0/"); err != nil {
		return nil, fmt.Errorf("leasescheduler: Options.Prefix: %w", err)
	}
	if o.Clock == nil {
		o.Clock = client.Clock()
	}
	if o.Observer == nil {
		o.Observer = jobevent.NopObserver
	}
	return &Locker{client: client, o: o}, nil
}

// RunKey returns the key of the lease that a run of job holds.
func (l *Locker) RunKey(job string) string {
	return keyspace.LeaseKey(l.o.Prefix, keyspace.SchedulerRun, job)
}

// SlotKey returns the key of the lease that marks slot s of job as taken.
// The slots of a job take turns on three keys.
func (l *Locker) SlotKey(job string, s Slot) string {
	return keyspace.LeaseKey(l.o.Prefix, keyspace.SchedulerSlot(s.Index), job)
}

// Lock implements gocron.Locker: it acquires the lease of one run of job
// (gocron passes the job's name: the name given with gocron.WithName, or
// else the name of the job's function) and starts renewing it. It never
// waits for a holder: each acquisition is one attempt bounded by the
// policy's OperationTimeout. With Options.Slots it first acquires the lease
// of the run's slot, which it keeps until the slot has passed, and only the
// replica that got it tries for the run's lease.
//
// The error matches lease.ErrNotAcquired when another replica runs the job
// or has taken the slot; gocron then skips the run.
func (l *Locker) Lock(ctx context.Context, job string) (gocron.Lock, error) {
	k, err := l.lock(ctx, job)
	if err != nil {
		return nil, err
	}
	return k, nil
}

// lock takes the leases of a run of job, reporting a run that does not
// start to the Observer.
func (l *Locker) lock(ctx context.Context, job string) (*Lock, error) {
	k, err := l.take(ctx, job)
	if err != nil {
		l.o.Observer.Observe(notRun(job, err, l.o.Clock.Now()))
	}
	return k, err
}

func (l *Locker) take(ctx context.Context, job string) (*Lock, error) {
	if job == "" {
		return nil, errors.New("leasescheduler: empty job name")
	}
	k := &Lock{l: l, job: job}
	if l.o.Slots != nil {
		if s, ok := l.o.Slots(job, l.o.Clock.Now()); ok {
			if err := l.takeSlot(ctx, job, s); err != nil {
				return nil, err
			}
			k.slot = s
		}
	}
	h, err := l.client.TryAcquire(ctx, l.RunKey(job), l.o.Policy)
	if err != nil {
		if k.slot.IsZero() {
			return nil, fmt.Errorf("leasescheduler: job %q: %w", job, err)
		}
		return nil, fmt.Errorf("leasescheduler: job %q, %v: the slot is ours, but the run's lease is not: %w", job, k.slot, err)
	}
	// Renew until Unlock, whatever happens to the scheduler's context.
	m, err := h.StartManaged(context.WithoutCancel(ctx))
	if err != nil {
		// The local deadline passed since the acquire: don't run on it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.o.Policy.Options().OperationTimeout)
		defer cancel()
		_ = h.Release(rctx)
		return nil, fmt.Errorf("leasescheduler: job %q: %w", job, err)
	}
	k.h, k.m, k.start = h, m, l.o.Clock.Now()
	return k, nil
}

// takeSlot acquires the lease of slot s of job for the rest of the slot
// and half an interval more, and never renews or releases it: the handle
// is dropped, never managed.
func (l *Locker) takeSlot(ctx context.Context, job string, s Slot) error {
	now := l.o.Clock.Now()
	interval := s.End.Sub(s.Start)
	ttl := min(s.End.Add(interval/2).Sub(now), lease.MaxTTL)
	if ttl < lease.MinTTL || interval <= 0 {
		return fmt.Errorf("leasescheduler: job %q: %v is over or empty at %s", job, s, now.UTC().Format(time.RFC3339Nano))
	}
	p, err := slotPolicy(ttl, l.o.Policy.Options().OperationTimeout)
	if err != nil {
		return fmt.Errorf("leasescheduler: job %q, %v: %w", job, s, err)
	}
	if _, err := l.client.TryAcquire(ctx, l.SlotKey(job, s), p); err != nil {
		return fmt.Errorf("leasescheduler: job %q, %v: %w", job, s, err)
	}
	return nil
}

// A Lock is the lease of one run of a job, renewed until Unlock. It
// implements gocron.Lock.
type Lock struct {
	l       *Locker
	owner   *jobLocker // the locker of Locker.Job that took it, or nil
	claimed bool       // by a run of owner's task; guarded by owner.mu
	job     string
	slot    Slot
	h       *lease.Handle
	m       *lease.Managed
	start   time.Time   // when the leases were taken, on the Locker's clock
	ran     atomic.Bool // the run was reported to the Observer

	once sync.Once
	err  error
}

var _ gocron.Lock = (*Lock)(nil)

// Context returns a context that is cancelled when the run's lease is lost
// (with a cause wrapping lease.ErrLost) or released by Unlock.
func (k *Lock) Context() context.Context { return k.m.Context() }

// Run describes the run: job, slot and the lease's fencing token.
func (k *Lock) Run() Run { return Run{Job: k.job, Lease: k.h.Snapshot(), Slot: k.slot} }

// Unlock stops renewing the run's lease and releases it, so the job may run
// elsewhere at once. It runs under a context detached from ctx and bounded
// by the policy's OperationTimeout, so it works when ctx is already
// cancelled (gocron passes the job's context, which is cancelled at
// shutdown). A slot's lease is kept until the slot has passed.
//
// It returns nil if the lease was released, the *lease.LostError if the
// lease was lost during the run, or the release's error. Later calls
// return the same.
//
// A run of a plain gocron task, whose result the Locker does not see, is
// reported to the Observer here: as Unchecked, or Lost if the lease was
// lost during the run.
func (k *Lock) Unlock(ctx context.Context) error {
	k.once.Do(func() {
		l := k.l
		if k.owner != nil {
			k.owner.forget(k)
		}
		k.report(nil, false)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.o.Policy.Options().OperationTimeout)
		defer cancel()
		k.err = k.h.Release(rctx)
		_ = k.m.Stop(rctx)
		if lost := k.m.Err(); lost != nil {
			k.err = lost
		}
	})
	return k.err
}

// report reports the run to the Observer, once: with checked, err is the
// job's error; without, the job's result is not known (a plain gocron
// task's).
func (k *Lock) report(err error, checked bool) {
	if k.ran.Swap(true) {
		return
	}
	k.l.o.Observer.Observe(ran(k.job, k.h.Token(), k.m.Err(), err, checked, k.start, k.l.o.Clock.Now()))
}

// slotPolicy is the policy of a slot's lease: ttl, and acquisitions
// bounded by op but by no more than a fifth of ttl. The lease is never
// renewed, so RenewEvery does not apply and keeps its default (ttl/3);
// with Retry's default (at most ttl/20) and an OperationTimeout of at
// most ttl/5, NewPolicy's rule RenewEvery + Retry + 2×OperationTimeout ≤
// TTL − SafetyMargin (ttl·5/6) holds for every ttl NewPolicy accepts.
func slotPolicy(ttl, op time.Duration) (lease.Policy, error) {
	return lease.NewPolicy(lease.PolicyOptions{TTL: ttl, OperationTimeout: min(op, ttl/5)})
}
