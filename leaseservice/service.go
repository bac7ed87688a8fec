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
// returns the release's error, if any. Waiting replicas campaign with
// Acquire calls that wait at least a TTL, so on backends that announce
// releases (lease.ReleaseWatcher: the Valkey, PostgreSQL and memory backends) one
// of them takes over within a round trip or two instead of at its next
// retry.
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

// Options configure a Service. The zero value campaigns forever.
type Options struct {
	// Once makes Run return after the first term instead of campaigning
	// again.
	Once bool

	// Rest is how long Run waits after a term before it campaigns again.
	// Default 0: at once, which usually wins the lease back before a
	// waiting replica has been woken by the release. Set it to let another
	// replica take over when the function returns to step down.
	Rest time.Duration

	// ReleaseTimeout bounds the release at the end of a term, which runs
	// under a context detached from Run's. Default the policy's
	// OperationTimeout.
	ReleaseTimeout time.Duration

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
)

func (k TransitionKind) String() string {
	switch k {
	case Elected:
		return "elected"
	case Lost:
		return "lost"
	case Released:
		return "released"
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
	// Err is the loss for Lost and the release error for Released.
	Err error
}

// A Service campaigns for one lease and runs a function while holding it.
// Create it with New; its methods are safe for concurrent use.
type Service struct {
	client *lease.Client
	key    string
	policy lease.Policy // with Wait of at least one TTL, for campaigning
	fn     Func
	o      Options

	leader  atomic.Bool
	running atomic.Bool
	mu      sync.Mutex
	handle  *lease.Handle
}

// New returns a Service that runs fn while client holds the lease on key
// under policy. It validates its arguments; it does no I/O.
func New(client *lease.Client, key string, policy lease.Policy, fn Func, o Options) (*Service, error) {
	switch {
	case client == nil:
		return nil, errors.New("leaseservice: nil Client")
	case fn == nil:
		return nil, errors.New("leaseservice: nil Func")
	case o.Rest < 0:
		return nil, fmt.Errorf("leaseservice: Rest (%v) must not be negative", o.Rest)
	case o.ReleaseTimeout < 0:
		return nil, fmt.Errorf("leaseservice: ReleaseTimeout (%v) must not be negative", o.ReleaseTimeout)
	}
	if err := lease.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("leaseservice: %w", err)
	}
	po := policy.Options()
	if po.TTL == 0 {
		return nil, fmt.Errorf("leaseservice: %w: the zero Policy; build one with lease.NewPolicy", lease.ErrInvalidPolicy)
	}
	// Campaign with Acquire calls that wait at least a TTL, so that they
	// are woken by releases where the backend can tell.
	// Each Acquire keeps going until Wait: no cap on attempts, which would
	// make the campaign loop try again without a pause.
	po.Wait, po.MaxAttempts = max(po.Wait, po.TTL), 0
	campaign, err := lease.NewPolicy(po)
	if err != nil {
		return nil, fmt.Errorf("leaseservice: %w", err)
	}
	if o.ReleaseTimeout == 0 {
		o.ReleaseTimeout = po.OperationTimeout
	}
	return &Service{client: client, key: key, policy: campaign, fn: fn, o: o}, nil
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

// Handle returns the current term's handle, or nil between terms.
func (s *Service) Handle() *lease.Handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handle
}

// Run campaigns and runs terms until ctx ends, the function returns an
// error that is not caused by the lease's loss, or, with Options.Once, the
// first term ends. A Service runs at most one Run at a time.
//
// Run returns only after the function has returned and the lease was
// released (or the release attempted). It returns nil when ctx ended and
// the last release succeeded; the release's error if it failed; the
// function's error; or a campaign error that retrying cannot cure (an
// error matching lease.ErrInvalidKey or lease.ErrInvalidPolicy). Other
// campaign errors, such as an unreachable backend, are retried until ctx
// ends.
func (s *Service) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("leaseservice: Run is already running")
	}
	defer s.running.Store(false)
	for {
		h, err := s.campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		ferr, rerr := s.term(ctx, h)
		switch {
		case ferr != nil:
			return errors.Join(ferr, rerr)
		case ctx.Err() != nil || s.o.Once:
			return rerr
		}
		if s.o.Rest > 0 {
			t := time.NewTimer(s.o.Rest)
			select {
			case <-ctx.Done():
				t.Stop()
				return rerr
			case <-t.C:
			}
		}
	}
}

// campaign acquires the lease, retrying until ctx ends.
func (s *Service) campaign(ctx context.Context) (*lease.Handle, error) {
	for {
		h, err := s.client.Acquire(ctx, s.key, s.policy)
		switch {
		case err == nil:
			return h, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, lease.ErrInvalidKey), errors.Is(err, lease.ErrInvalidPolicy):
			return nil, err
		}
		// Not acquired within Wait, or the backend kept failing: Acquire
		// has already paused between its attempts, so go again.
	}
}

// term runs the function under h and releases h afterwards. It returns the
// function's error (unless caused by loss or ctx) and the release's.
func (s *Service) term(ctx context.Context, h *lease.Handle) (fnErr, releaseErr error) {
	// Renew until the function has returned, also after ctx ended: the
	// function may still be cleaning up under the lease. Its own context
	// ends at the loss or when ctx ends, whichever comes first.
	m, err := h.StartManaged(context.WithoutCancel(ctx))
	if err != nil {
		// The lease ended before the term began (the local deadline
		// passed since the acquire): no term; free the key and campaign
		// again.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.ReleaseTimeout)
		defer rcancel()
		_ = h.Release(rctx)
		return nil, nil
	}
	fctx, cancel := context.WithCancelCause(m.Context())
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()

	s.mu.Lock()
	s.handle = h
	s.mu.Unlock()
	s.leader.Store(true)
	s.notify(Transition{Kind: Elected, Key: s.key, Token: h.Token()})

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

	// Release even after a loss: if the backend was only unreachable, it
	// may still show this acquisition, and releasing frees the key sooner.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.ReleaseTimeout)
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
	s.mu.Lock()
	s.handle = nil
	s.mu.Unlock()
	if !lost {
		s.notify(Transition{Kind: Released, Key: s.key, Token: h.Token(), Err: releaseErr})
	}
	return err, releaseErr
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
