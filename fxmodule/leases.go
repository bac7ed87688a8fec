package fxmodule

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/golib/lease/lease"
)

var (
	// ErrNotStarted is returned by Leases.Acquire and Leases.TryAcquire
	// before the app has started (before Leases.Start).
	ErrNotStarted = errors.New("leasefx: not started")

	// ErrClosed is returned by Leases.Acquire, Leases.TryAcquire and
	// Leases.Go once the app has begun to stop.
	ErrClosed = errors.New("leasefx: stopped")

	// ErrStopping is the cause (see context.Cause) of the contexts the
	// module cancels when the app stops: Lease.Context and the context of
	// a function run with Leases.Go.
	ErrStopping = errors.New("leasefx: the app is stopping")
)

type state int

const (
	created state = iota
	running
	stopped
)

// Leases acquires leases through the module's Client with the default
// policy and the configured key prefix, keeps them renewed, runs functions
// while holding them (Go), and releases everything it holds when the app
// stops. It is safe for concurrent use. Get it from the graph, or from New
// outside Fx.
//
// # Stop
//
// Stop (the module's OnStop hook) does, for every lease, in this order:
//
//  1. stop taking new leases: Acquire, TryAcquire and Go return ErrClosed
//     and functions run with Go do not start another term;
//  2. cancel the work: the context of every function run with Go and the
//     Context of every Lease acquired here, with cause ErrStopping; every
//     lease stays renewed until step 4, so work winds down under a live
//     lease;
//  3. wait, until the stop context ends, for those functions to return
//     (work done under an acquired Lease is the caller's to wait for, in
//     its own OnStop hook, which Fx runs before this one);
//  4. stop renewing;
//  5. release, under context.WithoutCancel and Config.ReleaseTimeout, so
//     that the lease is handed back even when the stop deadline has
//     passed; the lease of a function run with Go is handed off instead
//     when a successor is known (RunOptions.Service.Successors, or a
//     preferred candidate waiting for it: see leaseservice), and released
//     if the hand-off fails (logged at Warn);
//  6. log every release that failed, and return it in Stop's error: a
//     failed release is never reported as success.
type Leases struct {
	client         *lease.Client
	policy         lease.Policy
	prefix         string
	releaseTimeout time.Duration
	log            *zap.Logger
	shutdowner     fx.Shutdowner
	onStart        []func(context.Context) error // migrations, checks
	onClose        func() error                  // after the last release

	mu       sync.Mutex
	state    state
	held     map[*Lease]struct{}
	services []*service
}

// Client returns the module's client.
func (l *Leases) Client() *lease.Client { return l.client }

// Policy returns the default policy.
func (l *Leases) Policy() lease.Policy { return l.policy }

// Key returns the backend key for name: Config.KeyPrefix + name. Use it
// with Client.Inspect.
func (l *Leases) Key(name string) string { return l.prefix + name }

// Observe returns the leadership of Key(name) as a sequence of states, as
// lease.Client.Observe does with default options: who holds it, with which
// token, hand-offs and the preferred candidate. It ends when ctx ends; it
// does not end when the app stops.
func (l *Leases) Observe(ctx context.Context, name string) iter.Seq2[lease.Observation, error] {
	return l.client.Observe(ctx, l.Key(name), lease.ObserveOptions{})
}

// Start runs the start-up work of the configured backend (PostgreSQL
// migrations, the Valkey check), bounded by ctx, then starts the functions
// registered with Go, each in its own goroutine. It does not wait for any
// lease. Start is the module's OnStart hook; outside Fx, call it once.
func (l *Leases) Start(ctx context.Context) error {
	l.mu.Lock()
	st := l.state
	l.mu.Unlock()
	if st != created {
		return errors.New("leasefx: Start called twice, or after Stop")
	}
	for _, f := range l.onStart {
		if err := f(ctx); err != nil {
			return fmt.Errorf("leasefx: start: %w", err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != created {
		return errors.New("leasefx: Start called twice, or after Stop")
	}
	l.state = running
	for _, s := range l.services {
		s.start()
	}
	l.log.Debug("lease module started", zap.Int("services", len(l.services)))
	return nil
}

// Acquire acquires the lease on Key(name) with the default policy (see
// lease.Client.Acquire for the waiting and the errors), starts renewing
// it, and tracks it until it is released. The renewal outlives ctx, which
// only bounds the acquisition; values in ctx are kept.
//
// Release the Lease when the work is done, also after a loss. Whatever is
// still held when the app stops is released by Stop.
func (l *Leases) Acquire(ctx context.Context, name string) (*Lease, error) {
	return l.acquire(ctx, name, false)
}

// TryAcquire is Acquire with a single attempt, as lease.Client.TryAcquire.
func (l *Leases) TryAcquire(ctx context.Context, name string) (*Lease, error) {
	return l.acquire(ctx, name, true)
}

func (l *Leases) acquire(ctx context.Context, name string, once bool) (*Lease, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	acquire := l.client.Acquire
	if once {
		acquire = l.client.TryAcquire
	}
	h, err := acquire(ctx, l.Key(name), l.policy)
	if err != nil {
		return nil, err
	}
	m, err := h.StartManaged(context.WithoutCancel(ctx))
	if err != nil {
		// The local deadline passed since the acquire: hand it back.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.policy.Options().OperationTimeout)
		defer cancel()
		_ = h.Release(rctx)
		return nil, err
	}
	x := &Lease{l: l, m: m}
	x.ctx, x.cancel = context.WithCancelCause(m.Context())

	l.mu.Lock()
	if l.state == running {
		l.held[x] = struct{}{}
		l.mu.Unlock()
		return x, nil
	}
	l.mu.Unlock()
	// Stop began while we were acquiring: hand the lease back.
	if err := l.releaseOnStop(ctx, x); err != nil {
		return nil, errors.Join(ErrClosed, err)
	}
	return nil, ErrClosed
}

// check returns ErrNotStarted or ErrClosed unless l is running.
func (l *Leases) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case created:
		return ErrNotStarted
	case stopped:
		return ErrClosed
	}
	return nil
}

// Stop releases what Leases holds, in the order given in the type's
// documentation, and then closes the backend the module built. ctx bounds
// the wait for functions to return; each release is bounded by
// Config.ReleaseTimeout instead. It returns an error for every function
// that did not return in time, every release that failed or whose outcome
// is unknown, and every term that ended with a failed release; a lease
// that had already been lost is logged, not returned. Stop is the module's
// OnStop hook; calls after the first return nil.
func (l *Leases) Stop(ctx context.Context) error {
	l.mu.Lock()
	if l.state == stopped {
		l.mu.Unlock()
		return nil
	}
	l.state = stopped // 1: no new leases, no new terms
	services := l.services
	held := make([]*Lease, 0, len(l.held))
	for x := range l.held {
		held = append(held, x)
	}
	l.mu.Unlock()
	l.log.Debug("lease module stopping", zap.Int("services", len(services)), zap.Int("held", len(held)))

	// 2: cancel the work.
	for _, s := range services {
		s.stop()
	}
	for _, x := range held {
		x.cancel(ErrStopping)
	}

	// 3: wait for the functions. Each one's term then stops renewing and
	// releases its lease (leaseservice), under ReleaseTimeout.
	var errs []error
	for _, s := range services {
		if err := s.wait(ctx); err != nil {
			errs = append(errs, err)
		}
	}

	// 4 and 5: stop renewing and release, all at once.
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for _, x := range held {
		wg.Go(func() {
			if err := l.releaseOnStop(ctx, x); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	if l.onClose != nil {
		if err := l.onClose(); err != nil {
			errs = append(errs, fmt.Errorf("leasefx: close backend: %w", err))
		}
	}
	return errors.Join(errs...)
}

// releaseOnStop stops renewing x and releases it under a context detached
// from ctx. It logs the outcome; it returns an error unless the lease was
// released, or was already released or lost.
func (l *Leases) releaseOnStop(ctx context.Context, x *Lease) error {
	x.cancel(ErrStopping)
	_ = x.m.Stop(ctx) // 4: the loss, if any, is reported by Release below
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.releaseTimeout)
	defer cancel()
	err := x.release(rctx)
	h := x.Handle()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lease.ErrReleased):
		return nil // released by its holder meanwhile
	case errors.Is(err, lease.ErrLost):
		l.log.Warn("lease was already lost when the app stopped",
			zap.String("key", h.Key()), zap.Uint64("token", uint64(h.Token())), zap.Error(err))
		return nil
	}
	l.log.Error("lease not released on stop; it stays held until its TTL passes",
		zap.String("key", h.Key()), zap.Uint64("token", uint64(h.Token())), zap.Error(err))
	return fmt.Errorf("leasefx: release %q on stop: %w", h.Key(), err)
}

// forget stops tracking x.
func (l *Leases) forget(x *Lease) {
	l.mu.Lock()
	delete(l.held, x)
	l.mu.Unlock()
}

// A Lease is a lease acquired through Leases: renewed in the background,
// and released by Release or when the app stops. Its methods are safe for
// concurrent use.
type Lease struct {
	l      *Leases
	m      *lease.Managed
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Handle returns the acquisition, whose Token (or Snapshot) should go with
// every protected write.
func (x *Lease) Handle() *lease.Handle { return x.m.Handle() }

// Context returns a context for the work the lease protects. It is
// cancelled when the lease is lost (the cause wraps lease.ErrLost), when
// it is released (lease.ErrReleased) and when the app stops
// (ErrStopping). On stop it is cancelled before the renewal stops, so that
// work can wind down while the lease is still renewed.
func (x *Lease) Context() context.Context { return x.ctx }

// Lost returns a channel that is closed when the lease is lost.
func (x *Lease) Lost() <-chan struct{} { return x.m.Lost() }

// Err returns the loss, or nil if the lease was not lost.
func (x *Lease) Err() error { return x.m.Err() }

// Release stops renewing, releases the lease and stops tracking it; errors
// are those of lease.Handle.Release. ctx bounds the release; during
// shutdown pass context.WithoutCancel(ctx).
func (x *Lease) Release(ctx context.Context) error {
	x.l.forget(x)
	return x.release(ctx)
}

func (x *Lease) release(ctx context.Context) error {
	x.cancel(lease.ErrReleased)
	err := x.m.Handle().Release(ctx)
	_ = x.m.Stop(ctx) // wait for the renewal goroutine; Release stopped it
	return err
}
