// Package leaseservice runs a function only while this process holds a
// lease: the way to run a singleton service (a scheduler, a consumer, a
// reconciler) on exactly one of several replicas at a time.
//
// # Terms
//
// Run campaigns for the lease, waiting until it is free (woken at once by a
// release on backends that support it). Once elected it starts managed
// renewal and calls the function with a context that is cancelled, with a
// cause, the moment the lease is lost. Renewal goes on until the function
// returns; then the lease is released under a context detached from the
// caller's, and Run campaigns again. One such period is a term.
//
// # Shutdown and hand-over
//
// Cancelling Run's context cancels the function's context; renewal goes on
// until the function has returned, then the lease is released and Run
// returns the release's error, if any. A waiting replica campaigns with
// one Client.Acquire call that goes on until it gets the lease or Run's
// context ends, so it waits as any Acquire does: on backends that announce
// releases (lease.ReleaseWatcher: the Valkey, PostgreSQL and memory
// backends) it sleeps until the holder's lease would end, at least the
// policy's Poll once it saw the holder renew, and a release wakes it at
// once, so one standby takes over within a round trip or two and an idle
// standby makes about one backend call per TTL. Without release
// notifications (leasepostgres with DisableNotify) it asks every Retry.
//
// # Failures
//
// A function that returns an error (one that neither the lease's loss nor
// Run's context caused) or panics has failed. By default the term ends,
// the lease is released so that another replica can take over, and after
// a pause that starts at DefaultRestartDelay (1s) and doubles with each
// consecutive failure up to DefaultMaxRestartDelay (1m) Run campaigns and
// runs the function again: a replica never stays up without its
// singleton. Options.RestartDelay and MaxRestartDelay change the pauses;
// Options.StopOnError makes Run return the error instead, for a
// supervisor that restarts the process.
//
// # Health
//
// Service.Check is a func() error for health checks, and HealthHandler
// serves such checks over HTTP, as client-go's leader-election healthz
// adaptor does: unhealthy when Run is not campaigning, a backend call of
// the campaign hangs, or the function keeps running past the lease's local
// deadline.
//
// # Fencing
//
// The function must return promptly when its context is cancelled. Even so,
// a paused process can outlive its lease: pass the handle's token to every
// write the service makes (see package fence).
package leaseservice

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golib/lease/lease"
)

// Func is the work done while holding the lease. ctx is cancelled when the
// lease is lost (with a cause wrapping lease.ErrLost) or when Run's context
// ends (with its cause); the lease is renewed until Func returns, so
// cleanup after a shutdown still runs under it. h is the term's
// acquisition, whose token should accompany every protected write.
type Func func(ctx context.Context, h *lease.Handle) error

// DefaultRestartDelay and DefaultMaxRestartDelay are the pauses before a
// failed function is run again when Options.RestartDelay and
// Options.MaxRestartDelay are zero.
const (
	DefaultRestartDelay    = time.Second
	DefaultMaxRestartDelay = time.Minute
)

// Options configure a Service. The zero value campaigns forever and runs
// a function that fails again, after a pause that grows from
// DefaultRestartDelay to DefaultMaxRestartDelay.
type Options struct {
	// Once makes Run return after the first term that the function did not
	// fail, instead of campaigning again.
	Once bool

	// Rest is how long Run waits after a term before it campaigns again.
	// Default 0: at once, which usually wins the lease back before a
	// waiting replica has been woken by the release. Set it to let another
	// replica take over when the function returns to step down. After a
	// failed term Run waits the restart delay instead.
	Rest time.Duration

	// StopOnError makes Run return the function's error, after releasing
	// the lease, when the function fails: returns an error that neither
	// the lease's loss nor Run's context caused, or panics. Use it when
	// something else restarts the process on that error (a supervisor
	// watching Run's result). Default false: the term ends, the lease is
	// released, and after the restart delay Run campaigns and runs the
	// function again, so that a failure never leaves the replica up but
	// without its singleton. Each failure is reported to OnTransition as
	// Failed.
	StopOnError bool

	// RestartDelay is the pause after the first of consecutive failures
	// before Run campaigns again; it doubles with each further failure, up
	// to MaxRestartDelay, and each pause is shortened by a random amount
	// of up to 20% so that replicas spread out. A term that ends without
	// failing, or that ran for at least MaxRestartDelay before failing,
	// starts the count again. The lease is released during the pause, so
	// another replica can take over. Default DefaultRestartDelay.
	RestartDelay time.Duration

	// MaxRestartDelay caps the pause. Default DefaultMaxRestartDelay, or
	// RestartDelay if that is longer. It must not be less than
	// RestartDelay.
	MaxRestartDelay time.Duration

	// ReleaseTimeout bounds the release at the end of a term, which runs
	// under a context detached from Run's. Default the policy's
	// OperationTimeout.
	ReleaseTimeout time.Duration

	// HealthGrace is how far past its bound (the policy's
	// OperationTimeout) a backend call of the campaign, and past the
	// lease's local deadline a term whose function has not returned, may
	// go before Check reports the service unhealthy (client-go's
	// maxTolerableExpiredLease). Default the policy's TTL.
	HealthGrace time.Duration

	// OnTransition, if set, is called synchronously from Run's goroutine at
	// each transition. It must not block for long.
	OnTransition func(Transition)
}

// TransitionKind says what happened to the service's leadership.
type TransitionKind int

const (
	// Elected: the lease was acquired; the function is about to run.
	Elected TransitionKind = iota + 1
	// Lost: the lease was lost while the function ran; its context was
	// cancelled.
	Lost
	// Released: the term ended and the lease was released (Err is nil) or
	// the release failed (Err says how).
	Released
	// Failed: the function returned an error that neither the lease's loss
	// nor Run's context caused, or panicked (Err is the error). The lease
	// is released next; unless Options.StopOnError is set, Run campaigns
	// again after RestartIn.
	Failed
)

func (k TransitionKind) String() string {
	switch k {
	case Elected:
		return "elected"
	case Lost:
		return "lost"
	case Released:
		return "released"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("TransitionKind(%d)", int(k))
}

// Transition describes one change of leadership.
type Transition struct {
	// Kind says what happened.
	Kind TransitionKind
	// Key is the service's lease key.
	Key string
	// Token is the fencing token of the term the transition belongs to.
	Token lease.Token
	// Err is the loss for Lost, the release error for Released and the
	// function's error for Failed.
	Err error
	// RestartIn is, for Failed, the pause before Run campaigns again; zero
	// with Options.StopOnError.
	RestartIn time.Duration
}

// A Service campaigns for one lease and runs a function while holding it.
// Create it with New; its methods are safe for concurrent use.
type Service struct {
	client *lease.Client // the caller's owner, clock and observer, over b
	b      *tracked      // the caller's client's backend, tracked for Check
	key    string
	policy lease.Policy // without Wait and MaxAttempts, for campaigning
	fn     Func
	o      Options

	leader  atomic.Bool
	running atomic.Bool

	mu     sync.Mutex
	handle *lease.Handle // the current term's, or nil
	state  state
	runErr error // what Run returned, in state returned
}

// state is what Run is doing, for Check.
type state int

const (
	idle        state = iota // Run has not been called
	campaigning              // the campaign's Acquire call is in flight
	holding                  // a term: the function runs, or its lease is being released
	pausing                  // between terms
	returned                 // Run returned
)

// New returns a Service that runs fn while client holds the lease on key
// under policy. It validates its arguments; it does no I/O.
//
// The policy's Wait and MaxAttempts do not apply: the campaign waits for
// the lease until Run's context ends (see Run). The service makes its
// backend calls through a client of its own with client's owner, clock
// and observer, over client's backend, so that Check can see a backend
// call that hangs.
func New(client *lease.Client, key string, policy lease.Policy, fn Func, o Options) (*Service, error) {
	switch {
	case client == nil:
		return nil, errors.New("leaseservice: nil Client")
	case fn == nil:
		return nil, errors.New("leaseservice: nil Func")
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Rest", o.Rest}, {"RestartDelay", o.RestartDelay}, {"MaxRestartDelay", o.MaxRestartDelay}, {"ReleaseTimeout", o.ReleaseTimeout}, {"HealthGrace", o.HealthGrace}} {
		if f.d < 0 {
			return nil, fmt.Errorf("leaseservice: %s (%v) must not be negative", f.name, f.d)
		}
	}
	if o.MaxRestartDelay != 0 && o.MaxRestartDelay < o.RestartDelay {
		return nil, fmt.Errorf("leaseservice: MaxRestartDelay (%v) must not be less than RestartDelay (%v)", o.MaxRestartDelay, o.RestartDelay)
	}
	if err := lease.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("leaseservice: %w", err)
	}
	po := policy.Options()
	if po.TTL == 0 {
		return nil, fmt.Errorf("leaseservice: %w: the zero Policy; build one with lease.NewPolicy", lease.ErrInvalidPolicy)
	}
	// Campaign with one Acquire call that waits until it gets the lease
	// or ctx ends: a call that ended at Wait would be followed by one that
	// asks at once and sets up a new watch, about two calls per TTL
	// instead of one.
	po.Wait, po.MaxAttempts = 0, 0
	campaign, err := lease.NewPolicy(po)
	if err != nil {
		return nil, fmt.Errorf("leaseservice: %w", err)
	}
	b, tb := track(client.Backend(), client.Clock())
	client, err = lease.NewClient(b, lease.ClientOptions{Owner: client.Owner(), Clock: client.Clock(), Observer: client.Observer()})
	if err != nil {
		return nil, fmt.Errorf("leaseservice: %w", err)
	}
	if o.ReleaseTimeout == 0 {
		o.ReleaseTimeout = po.OperationTimeout
	}
	if o.RestartDelay == 0 {
		o.RestartDelay = DefaultRestartDelay
	}
	if o.MaxRestartDelay == 0 {
		o.MaxRestartDelay = max(DefaultMaxRestartDelay, o.RestartDelay)
	}
	if o.HealthGrace == 0 {
		o.HealthGrace = po.TTL
	}
	return &Service{client: client, b: tb, key: key, policy: campaign, fn: fn, o: o}, nil
}

// Run is New followed by Service.Run.
func Run(ctx context.Context, client *lease.Client, key string, policy lease.Policy, fn Func, o Options) error {
	s, err := New(client, key, policy, fn, o)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// IsLeader reports whether the service holds the lease and its function is
// running, from local state (no I/O). It turns false as soon as a loss is
// detected, and before the lease is released.
func (s *Service) IsLeader() bool { return s.leader.Load() }

// Key returns the service's lease key.
func (s *Service) Key() string { return s.key }

// Handle returns the current term's handle, or nil between terms.
func (s *Service) Handle() *lease.Handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handle
}

// Run campaigns and runs terms until ctx ends; or, with
// Options.StopOnError, until the function fails; or, with Options.Once,
// until a term ends without the function failing. Without StopOnError a
// failed function is run again after the restart delay (see Options).
// A Service runs at most one Run at a time: a call while another runs
// returns an error at once.
//
// Run returns only after the function has returned and the lease was
// released (or the release attempted). It returns nil when ctx ended and
// the last release succeeded; the release's error if it failed; the
// function's error with StopOnError; or a campaign error that retrying
// cannot cure (an error matching lease.ErrInvalidKey or
// lease.ErrInvalidPolicy). Other campaign errors, such as an unreachable
// backend, are retried until ctx ends.
func (s *Service) Run(ctx context.Context) (err error) {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("leaseservice: Run is already running")
	}
	defer s.running.Store(false)
	defer func() { s.set(returned, nil, err) }()
	var b backoff
	for {
		h, err := s.campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		ferr, restartIn, rerr := s.term(ctx, h, &b)
		switch {
		case ferr != nil && s.o.StopOnError:
			return errors.Join(ferr, rerr)
		case ctx.Err() != nil, ferr == nil && s.o.Once:
			return rerr
		}
		pause := s.o.Rest
		if ferr != nil {
			pause = restartIn
		}
		s.set(pausing, nil, nil)
		if pause > 0 {
			t := s.client.Clock().NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return rerr
			case <-t.C():
			}
		}
	}
}

// set records what Run is doing, for Check.
func (s *Service) set(st state, h *lease.Handle, runErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state, s.handle, s.runErr = st, h, runErr
}

// campaign acquires the lease, waiting for it until it is granted or ctx ends.
func (s *Service) campaign(ctx context.Context) (*lease.Handle, error) {
	s.set(campaigning, nil, nil)
	for {
		// Without Wait and MaxAttempts, Acquire returns only with the
		// lease or when ctx ends; it pauses between its attempts itself.
		h, err := s.client.Acquire(ctx, s.key, s.policy)
		switch {
		case err == nil:
			return h, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, lease.ErrInvalidKey), errors.Is(err, lease.ErrInvalidPolicy):
			return nil, err
		}
		// Any other error is one Acquire should not have returned; pause
		// a Retry so as never to spin, and go again.
		t := s.client.Clock().NewTimer(s.policy.Options().Retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C():
		}
	}
}

// backoff counts consecutive failed terms and says how long to pause.
type backoff struct{ failures int }

// next returns the pause after a term that failed after running for ran.
func (b *backoff) next(o Options, ran time.Duration) time.Duration {
	if ran >= o.MaxRestartDelay {
		b.failures = 0
	}
	d := o.RestartDelay
	for range b.failures {
		if d >= o.MaxRestartDelay/2 {
			d = o.MaxRestartDelay
			break
		}
		d *= 2
	}
	d = min(d, o.MaxRestartDelay)
	b.failures++
	return d - rand.N(d/5+1) // up to 20% shorter
}

// term runs the function under h and releases h afterwards. It returns the
// function's error (unless caused by loss or ctx) with the pause before
// the next term, and the release's error.
func (s *Service) term(ctx context.Context, h *lease.Handle, b *backoff) (fnErr error, restartIn time.Duration, releaseErr error) {
	clock := s.client.Clock()
	s.set(holding, h, nil)
	defer s.set(holding, nil, nil)
	releaseCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), s.o.ReleaseTimeout)
	}

	// Renew until the function has returned, also after ctx ended: the
	// function may still be cleaning up under the lease. Its own context
	// ends at the loss or when ctx ends, whichever comes first.
	m, err := h.StartManaged(context.WithoutCancel(ctx))
	if err != nil {
		// The lease ended before the term began (the local deadline
		// passed since the acquire): no term; free the key and campaign
		// again.
		rctx, rcancel := releaseCtx()
		defer rcancel()
		_ = h.Release(rctx)
		return nil, 0, nil
	}
	fctx, cancel := context.WithCancelCause(m.Context())
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()

	s.leader.Store(true)
	s.notify(Transition{Kind: Elected, Key: s.key, Token: h.Token()})

	began := clock.Now()
	done := make(chan error, 1)
	go func() {
		done <- s.safeCall(fctx, h)
	}()
	lostSeen := false
	select {
	case err = <-done:
	case <-m.Lost():
		s.leader.Store(false)
		lostSeen = true
		s.notify(Transition{Kind: Lost, Key: s.key, Token: h.Token(), Err: m.Err()})
		err = <-done
	}
	s.leader.Store(false)
	if fctx.Err() != nil {
		err = nil // the function stopped because the lease was lost or ctx ended
	}
	if err != nil {
		if !s.o.StopOnError {
			restartIn = b.next(s.o, clock.Now().Sub(began))
		}
		s.notify(Transition{Kind: Failed, Key: s.key, Token: h.Token(), Err: err, RestartIn: restartIn})
	} else {
		b.failures = 0
	}

	// Release even after a loss: if the backend was only unreachable, it
	// may still show this acquisition, and releasing frees the key sooner.
	rctx, rcancel := releaseCtx()
	defer rcancel()
	releaseErr = h.Release(rctx)
	_ = m.Stop(rctx)
	lost := m.Err() != nil
	if lost {
		releaseErr = nil // the acquisition was already over; nothing to report
		if !lostSeen {   // lost after the function returned, before the release
			s.notify(Transition{Kind: Lost, Key: s.key, Token: h.Token(), Err: m.Err()})
		}
	}
	if !lost {
		s.notify(Transition{Kind: Released, Key: s.key, Token: h.Token(), Err: releaseErr})
	}
	return err, restartIn, releaseErr
}

func (s *Service) safeCall(ctx context.Context, h *lease.Handle) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("leaseservice: %q: function panicked: %v", s.key, r)
		}
	}()
	return s.fn(ctx, h)
}

func (s *Service) notify(t Transition) {
	if s.o.OnTransition != nil {
		s.o.OnTransition(t)
	}
}
