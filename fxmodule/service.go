package fxmodule

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseservice"
)

// RunOptions configure a function run with Leases.Go. The zero value runs
// it under the default policy, term after term, for the app's lifetime,
// and runs it again after a pause when it fails (leaseservice.Options).
type RunOptions struct {
	// Policy, if not the zero Policy, replaces the default policy for this
	// lease.
	Policy lease.Policy

	// Service is passed to leaseservice.New. A zero ReleaseTimeout means
	// Config.ReleaseTimeout. Its RestartDelay, MaxRestartDelay and
	// StopOnError say what happens when the function fails; by default it
	// is run again after a pause that grows from 1s to 1m.
	Service leaseservice.Options

	// ShutdownOnLoss shuts the app down through fx.Shutdowner, with exit
	// code ExitCode, when the lease is lost while the function runs, and
	// stops campaigning for it. Use it for a singleton whose loss the
	// process cannot recover from by itself; the orchestrator then
	// restarts it. Without it the function's context is cancelled and the
	// service campaigns again.
	ShutdownOnLoss bool

	// ShutdownOnError shuts the app down the same way when the function
	// fails: returns an error that is not caused by the lease's loss or
	// the app's stop, or panics. Without it each failure is logged at
	// Error and the function is run again after the restart delay of
	// Service (unless Service.StopOnError is set, which stops campaigning
	// for the lease: Leases.Check then reports the service).
	ShutdownOnError bool

	// ExitCode is the exit code of such a shutdown (fx.ExitCode). Default
	// 1.
	ExitCode int
}

// Go runs fn only while holding the lease on Key(name), as a
// leaseservice.Service for the app's lifetime: from Start (at once if the
// app has started) until Stop, campaigning for the lease and running fn for
// each term. fn's context is cancelled when the lease is lost and when the
// app stops; on stop the lease is renewed until fn returns, then released
// (see Leases). It returns the Service, whose IsLeader and Handle report
// the current term, or an error for an invalid name or option, or
// ErrClosed once the app has begun to stop.
//
// Call it from an fx.Invoke, so that the function is registered before the
// app starts:
//
//	fx.Invoke(func(leases *leasefx.Leases, db *Store) error {
//		_, err := leases.Go("billing/nightly", db.nightly, leasefx.RunOptions{ShutdownOnLoss: true})
//		return err
//	})
func (l *Leases) Go(name string, fn leaseservice.Func, o RunOptions) (*leaseservice.Service, error) {
	if fn == nil {
		return nil, errors.New("leasefx: Go: nil function")
	}
	if (o.ShutdownOnLoss || o.ShutdownOnError) && l.shutdowner == nil {
		return nil, errors.New("leasefx: Go: RunOptions.ShutdownOnLoss and ShutdownOnError need Params.Shutdowner")
	}
	if o.ExitCode == 0 {
		o.ExitCode = 1
	}
	policy := o.Policy
	if policy.TTL() == 0 {
		policy = l.policy
	}
	so := o.Service
	if so.ReleaseTimeout == 0 {
		so.ReleaseTimeout = l.releaseTimeout
	}
	s := &service{l: l, key: l.Key(name), fn: fn, o: o, done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	userHook := so.OnTransition
	so.OnTransition = func(t leaseservice.Transition) {
		s.transition(t)
		if userHook != nil {
			userHook(t)
		}
	}
	svc, err := leaseservice.New(l.client, s.key, policy, s.call, so)
	if err != nil {
		return nil, fmt.Errorf("leasefx: Go: %w", err)
	}
	s.svc = svc

	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case stopped:
		s.cancel(ErrClosed)
		return nil, ErrClosed
	case running:
		s.start()
	}
	l.services = append(l.services, s)
	return svc, nil
}

// service is one function run with Leases.Go.
type service struct {
	l      *Leases
	key    string
	fn     leaseservice.Func
	o      RunOptions
	svc    *leaseservice.Service
	ctx    context.Context // Run's; cancelling it ends the campaign
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when Run has returned

	shutdownOnce sync.Once

	mu       sync.Mutex
	started  bool
	stopping bool
	cancelFn context.CancelCauseFunc // the running function's, or nil
	stopErr  error                   // Run's, when it returned on stop
}

func (s *service) start() {
	s.mu.Lock()
	s.started = true
	s.mu.Unlock()
	go s.run()
}

func (s *service) run() {
	defer close(s.done)
	err := s.svc.Run(s.ctx)
	s.cancel(nil)
	if err == nil {
		return
	}
	s.mu.Lock()
	stopping := s.stopping
	if stopping {
		s.stopErr = err // wait returns it
	}
	s.mu.Unlock()
	if !stopping {
		s.l.log.Error("lease service ended", zap.String("key", s.key), zap.Error(err))
		if s.o.ShutdownOnError {
			s.shutdown("the function under the lease failed")
		}
	}
}

// call runs the function for one term, under a context of its own, so
// that Stop can cancel the function while the term keeps renewing.
func (s *service) call(ctx context.Context, h *lease.Handle) (err error) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		s.cancel(ErrStopping) // end the term at once, without running fn
		return nil
	}
	fctx, cancel := context.WithCancelCause(ctx)
	s.cancelFn = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.cancelFn = nil
		stopping := s.stopping
		s.mu.Unlock()
		cancel(nil)
		if !stopping {
			// leaseservice reports a loss only if it sees it before the
			// function returns; the cause of ctx always tells.
			if cause := context.Cause(ctx); errors.Is(cause, lease.ErrLost) {
				s.lost(cause)
			}
			return
		}
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrStopping) {
			s.l.log.Error("function under the lease failed while the app stopped",
				zap.String("key", s.key), zap.Error(err))
		}
		// Cancel Run's context before the term goes on, so that it stops
		// renewing, releases the lease and does not campaign again.
		s.cancel(ErrStopping)
		err = nil
	}()
	return s.fn(fctx, h)
}

func (s *service) transition(t leaseservice.Transition) {
	switch t.Kind {
	case leaseservice.Lost:
		s.lost(t.Err)
	case leaseservice.HandedOff:
		s.l.log.Info("lease handed off",
			zap.String("key", s.key), zap.Uint64("token", uint64(t.Token)), zap.Strings("candidates", t.Candidates))
	case leaseservice.Released:
		if t.HandOffErr != nil {
			s.l.log.Warn("lease not handed off; released instead",
				zap.String("key", s.key), zap.Uint64("token", uint64(t.Token)), zap.Strings("candidates", t.Candidates),
				zap.NamedError("handOffError", t.HandOffErr), zap.Error(t.Err))
		}
	case leaseservice.Failed:
		if s.o.ShutdownOnError {
			s.l.log.Error("function under the lease failed",
				zap.String("key", s.key), zap.Uint64("token", uint64(t.Token)), zap.Error(t.Err))
			s.cancel(t.Err) // no further term
			s.shutdown("the function under the lease failed")
			return
		}
		if s.o.Service.StopOnError {
			s.l.log.Error("function under the lease failed; it is not run again",
				zap.String("key", s.key), zap.Uint64("token", uint64(t.Token)), zap.Error(t.Err))
			return
		}
		s.l.log.Error("function under the lease failed; running it again after a pause",
			zap.String("key", s.key), zap.Uint64("token", uint64(t.Token)), zap.Error(t.Err),
			zap.Duration("restartIn", t.RestartIn))
	}
}

// lost handles the loss of the lease while the function ran.
func (s *service) lost(err error) {
	if !s.o.ShutdownOnLoss {
		return
	}
	s.cancel(err) // no further term
	s.shutdown("the lease was lost")
}

// shutdown asks Fx, once, to shut the app down with the exit code, unless
// the app is already stopping.
func (s *service) shutdown(why string) {
	s.mu.Lock()
	stopping := s.stopping
	s.mu.Unlock()
	if stopping {
		return
	}
	s.shutdownOnce.Do(func() {
		s.l.log.Error("shutting the app down: "+why,
			zap.String("key", s.key), zap.Int("exitCode", s.o.ExitCode))
		if err := s.l.shutdowner.Shutdown(fx.ExitCode(s.o.ExitCode)); err != nil {
			s.l.log.Error("shutdown failed", zap.String("key", s.key), zap.Error(err))
		}
	})
}

// stop cancels the running function, or the campaign between terms.
func (s *service) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	if s.cancelFn != nil {
		s.cancelFn(ErrStopping)
	} else {
		s.cancel(ErrStopping)
	}
}

// wait waits until Run has returned or ctx ends, and returns what went
// wrong.
func (s *service) wait(ctx context.Context) error {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		select {
		case <-s.done:
			// Both were ready (select picks at random): it did return.
		default:
			s.cancel(ErrStopping) // stop renewing; the term releases when fn returns
			s.l.log.Error("function under the lease did not return before the stop deadline; its lease is released when it does",
				zap.String("key", s.key), zap.Error(ctx.Err()))
			return fmt.Errorf("leasefx: %q: the function did not return before the stop deadline: %w", s.key, ctx.Err())
		}
	}
	s.mu.Lock()
	err := s.stopErr
	s.mu.Unlock()
	if err != nil {
		s.l.log.Error("lease not released on stop; it stays held until its TTL passes",
			zap.String("key", s.key), zap.Error(err))
		return fmt.Errorf("leasefx: %q: %w", s.key, err)
	}
	return nil
}

// Check reports, as leaseservice.Service.Check does for each, whether every
// function registered with Go is campaigning or running under its
// renewed lease: nil if all are (or none is registered), else an error
// naming each that is not, such as one whose Run has returned
// (RunOptions.Service.StopOnError after a failure), one not started yet
// (before Start) or stopped (after Stop), or one whose function runs past
// its lease's local deadline. It does no I/O and is safe for concurrent
// use. Serve it with leaseservice.HealthHandler:
//
//	mux.Handle("/healthz", leaseservice.HealthHandler(leases.Check))
func (l *Leases) Check() error {
	l.mu.Lock()
	services := l.services
	l.mu.Unlock()
	var errs []error
	for _, s := range services {
		if err := s.svc.Check(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
