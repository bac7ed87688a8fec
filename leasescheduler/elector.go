package leasescheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-co-op/gocron/v2"

	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler/jobevent"
	"github.com/golib/lease/leaseservice"
)

// ElectorOptions configure an Elector. The zero value is valid.
type ElectorOptions struct {
	// OnTransition, if set, is called at each change of leadership, as
	// leaseservice.Options.OnTransition.
	OnTransition func(leaseservice.Transition)
	// Observer receives an event for every run of a task of Elector.Job or
	// Elector.Task: what it came to and when, on the client's clock.
	// leaseprom.Metrics.Jobs and leaseotel.Telemetry.Jobs count them.
	// Default nil: no events.
	Observer jobevent.Observer
	// Successors are the owners of the other replicas: when Run's context
	// ends while this replica leads, the lease is handed off to the first
	// of them to ask (or to a preferred candidate waiting for it), so that
	// during a rolling restart the next leader takes over at once instead
	// of racing for a free key, as leaseservice.Options.Successors. The
	// Elector's own owner is left out, so every replica can be given the
	// same list. Default none: the lease is released.
	Successors []string
	// YieldToPreferred hands the lease off to a preferred candidate as
	// soon as one waits, as leaseservice.Options.YieldToPreferred: the
	// leader's jobs see their Run's lease context cancelled with cause
	// leaseservice.ErrYielded. Default false.
	YieldToPreferred bool
}

// An Elector campaigns for one lease with package leaseservice, and the
// replica that holds it runs every job. It implements gocron.Elector.
// Its methods are safe for concurrent use.
type Elector struct {
	svc   *leaseservice.Service
	clock lease.Clock
	obs   jobevent.Observer

	mu   sync.Mutex
	term *term // nil unless leader
}

type term struct {
	ctx  context.Context
	snap lease.Snapshot
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector returns an Elector that campaigns with client for the lease on
// key under policy once Run is called. It validates its arguments and does
// no I/O.
func NewElector(client *lease.Client, key string, policy lease.Policy, o ElectorOptions) (*Elector, error) {
	e := &Elector{obs: o.Observer}
	if e.obs == nil {
		e.obs = jobevent.NopObserver
	}
	if client != nil {
		e.clock = client.Clock()
	}
	svc, err := leaseservice.New(client, key, policy, e.lead, leaseservice.Options{
		OnTransition:     o.OnTransition,
		Successors:       o.Successors,
		YieldToPreferred: o.YieldToPreferred,
	})
	if err != nil {
		return nil, fmt.Errorf("leasescheduler: NewElector: %w", err)
	}
	e.svc = svc
	return e, nil
}

// Run campaigns for the lease, holds it while it can and campaigns again
// after a loss, until ctx ends; then it hands the lease off to a successor
// (ElectorOptions.Successors) or releases it. It returns as
// leaseservice.Service.Run does. Start it before the scheduler: until it
// is elected, IsLeader reports ErrNotLeader and the jobs are skipped.
func (e *Elector) Run(ctx context.Context) error { return e.svc.Run(ctx) }

// lead is the leaseservice function: it publishes the term until the
// lease is lost or Run's context ends.
func (e *Elector) lead(ctx context.Context, h *lease.Handle) error {
	e.mu.Lock()
	e.term = &term{ctx: ctx, snap: h.Snapshot()}
	e.mu.Unlock()
	<-ctx.Done()
	e.mu.Lock()
	e.term = nil
	e.mu.Unlock()
	return nil
}

// current returns the term if this replica leads, or nil.
func (e *Elector) current() *term {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term == nil || e.term.ctx.Err() != nil {
		return nil
	}
	return e.term
}

// IsLeader implements gocron.Elector: it returns nil while this replica
// holds the lease, and ErrNotLeader otherwise. It reads local state (no
// I/O), which turns false the moment a loss is detected.
func (e *Elector) IsLeader(context.Context) error {
	if e.current() == nil {
		return ErrNotLeader
	}
	return nil
}

// Task returns a gocron.Task that runs fn while this replica leads, with a
// context cancelled when leadership is lost and the leader's lease in the
// Run (whose Job is empty: gocron does not tell an Elector the job's
// name). It fails with ErrNotLeader, without calling fn, on a replica that
// does not lead. Job is Task with a name, for the Run and the Observer's
// events.
func (e *Elector) Task(fn JobFunc) gocron.Task {
	return e.Job("", fn)
}

// Job returns a gocron.Task that runs fn as Task does, with name as the
// Run's Job and the job of the Observer's events (and so of the metrics
// adapters' job_name label): give each job of the scheduler its own name.
func (e *Elector) Job(name string, fn JobFunc) gocron.Task {
	if name != "" {
		e.obs.Observe(&jobevent.Added{EventInfo: jobevent.EventInfo{Job: name}})
	}
	return gocron.NewTask(electorTask{e, name, fn}.run)
}

type electorTask struct {
	e    *Elector
	name string
	fn   JobFunc
}

func (t electorTask) run(ctx context.Context) error {
	term := t.e.current()
	if term == nil {
		t.e.obs.Observe(notRun(t.name, ErrNotLeader, t.e.clock.Now()))
		return ErrNotLeader
	}
	start := t.e.clock.Now()
	err := call(ctx, term.ctx, Run{Job: t.name, Lease: term.snap}, t.fn)
	var lost error
	if cause := context.Cause(term.ctx); errors.Is(cause, lease.ErrLost) {
		lost = cause
	}
	t.e.obs.Observe(ran(t.name, term.snap.Token, lost, err, true, start, t.e.clock.Now()))
	return err
}

// Check reports whether the Elector campaigns or leads as it should, as
// leaseservice.Service.Check does: an error if Run is not running, a
// backend call of the campaign hangs, or the leader's term goes on past
// its lease's local deadline. A replica that waits for the leader is
// healthy, however long it waits. Serve it with
// leaseservice.HealthHandler.
func (e *Elector) Check() error { return e.svc.Check() }
