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
// until the function has returned, then renewal stops and the lease is
// handed off to a successor if one is known, else released, and Run
// returns the release's error, if any. A successor is known on a backend
// that hands leases off (lease.HandOffer: the memory, Valkey and
// PostgreSQL backends) when the key's record names a
// preferred candidate other than this replica (a lease.Client with
// ClientOptions.Preferred waiting for the key), or else when
// Options.Successors names replicas other than this one: the key is then
// offered to them alone for Options.HandOffWindow, and the first of them
// to ask gets it at once, with a higher token, instead of racing every
// other waiter. A hand-off that fails (the backend is no HandOffer, the
// lease was already lost, a backend error) is followed by a release, and
// reported in Transition.HandOffErr. A waiting replica campaigns with
// one Client.Acquire call that goes on until it gets the lease or Run's
// context ends, so it waits as any Acquire does: on backends that announce
// releases (lease.ReleaseWatcher: the Valkey, PostgreSQL and memory
// backends) it sleeps until the holder's lease would end, at least the
// policy's Poll once it saw the holder renew, and a release wakes it at
// once, so one standby takes over within a round trip or two and an idle
// standby makes about one backend call per TTL. Without release
// notifications (leasepostgres with DisableNotify) it asks every Retry.
//
// # Preferred candidates
//
// With Options.YieldToPreferred the leader watches its own key
// (Client.Observe) while it leads. When a preferred candidate other than
// itself appears (a replica whose lease.Client has
// ClientOptions.Preferred, waiting in Acquire), it cancels the function's
// context with cause ErrYielded and, once the function has returned,
// stops renewing and hands the lease off to exactly that candidate, then
// campaigns again as a follower. Nothing takes the lease by force, and
// that is all that is guaranteed:
//
//   - the hand-off happens only when the function returns after its
//     context was cancelled; a function that ignores cancellation keeps
//     the lease for as long as it runs;
//   - the candidate gets the key only if it asks for it within the offer
//     window (Options.HandOffWindow); after that the key is free for
//     anyone, the old leader included;
//   - a candidate is seen at once on a backend that announces changes
//     (lease.ChangeWatcher), else within lease.DefaultObservePoll;
//   - give ClientOptions.Preferred to one replica of a key only: two
//     preferred replicas would hand the key back and forth.
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
	"iter"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golib/lease/lease"
)

// ErrYielded is the cause (see context.Cause) of the function's context
// when the leader yields its lease to a preferred candidate
// (Options.YieldToPreferred).
var ErrYielded = errors.New("leaseservice: yielding the lease to a preferred candidate")

// Func is the work done while holding the lease. ctx is cancelled when the
// lease is lost (with a cause wrapping lease.ErrLost), when Run's context
// ends (with its cause) or when the leader yields to a preferred candidate
// (with cause ErrYielded); the lease is renewed until Func returns, so
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

	// ReleaseTimeout bounds each backend call at the end of a term (the
	// wait for the last renewal, the read of the key's preferred
	// candidate, the hand-off, the release), which run under a context
	// detached from Run's. Default the policy's OperationTimeout.
	ReleaseTimeout time.Duration

	// Successors are the owner strings (lease.ClientOptions.Owner) of the
	// replicas to hand the lease off to when Run's context ends while this
	// replica leads and the key has no preferred candidate: the first of
	// them to ask gets the key at once, before anyone else. The service's
	// own owner is left out, so every replica can be given the same list.
	// At most lease.MaxCandidates. Default none: the lease is released
	// (unless a preferred candidate waits). Needs a lease.HandOffer
	// backend; on another the hand-off fails and the lease is released.
	Successors []string

	// HandOffWindow is how long a hand-off offers the key to its
	// candidates before it is free for anyone. Default (zero) the policy's
	// TTL; at most the TTL.
	HandOffWindow time.Duration

	// YieldToPreferred makes the leader hand its lease off to a preferred
	// candidate as soon as one waits for the key: see the package
	// documentation, Preferred candidates, for what is and is not
	// guaranteed. Default false: a preferred candidate gets the lease
	// only at the end of a term (by a hand-off when Run's context ends,
	// or by racing the others after a release).
	YieldToPreferred bool

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
	// HandedOff: the term ended and the lease was handed off to one of
	// Candidates (at shutdown, or to yield to a preferred candidate).
	HandedOff
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
	case HandedOff:
		return "handed off"
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
	// Candidates are, for HandedOff, the owners the key was offered to;
	// for Released after a failed hand-off, those it was to be offered
	// to.
	Candidates []string
	// HandOffErr is, for Released, why the hand-off attempted before the
	// release failed (nil if none was attempted): the backend is no
	// lease.HandOffer (errors.ErrUnsupported), the lease was already lost,
	// or a backend error. The lease was released after it, or Err says
	// why not.
	HandOffErr error
}

// A Service campaigns for one lease and runs a function while holding it.
// Create it with New; its methods are safe for concurrent use.
type Service struct {
	client *lease.Client // the caller's owner, clock and observer, over b
	caller *lease.Client // the caller's, for Observe
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
	if len(o.Successors) > lease.MaxCandidates {
		return nil, fmt.Errorf("leaseservice: %d Successors, more than lease.MaxCandidates (%d)", len(o.Successors), lease.MaxCandidates)
	}
	var successors []string
	for _, c := range o.Successors {
		if err := lease.ValidateOwner(c); err != nil {
			return nil, fmt.Errorf("leaseservice: Successors: %w", err)
		}
		if c != client.Owner() {
			successors = append(successors, c)
		}
	}
	o.Successors = successors
	if o.HandOffWindow < 0 || o.HandOffWindow > po.TTL || (o.HandOffWindow > 0 && o.HandOffWindow < time.Millisecond) {
		return nil, fmt.Errorf("leaseservice: HandOffWindow (%v) must be between 1ms and the policy's TTL (%v), or zero", o.HandOffWindow, po.TTL)
	}
	caller := client
	b, tb := track(client.Backend(), client.Clock())
	client, err = lease.NewClient(b, lease.ClientOptions{Owner: client.Owner(), Clock: client.Clock(), Observer: client.Observer(), Preferred: client.Preferred()})
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
	return &Service{client: client, caller: caller, b: tb, key: key, policy: campaign, fn: fn, o: o}, nil
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

// Observe returns the leadership of the service's key as a sequence of
// states, as lease.Client.Observe does with default options: who holds it
// (this replica or another), with which token, whether it was handed off
// and to whom, and its preferred candidate. It ends when ctx ends.
func (s *Service) Observe(ctx context.Context) iter.Seq2[lease.Observation, error] {
	return s.caller.Observe(ctx, s.key, lease.ObserveOptions{})
}

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
// handed off or released (or the release attempted). It returns nil when
// ctx ended and the last hand-off or release succeeded; the release's
// error if it failed; the
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

// term runs the function under h and hands h off or releases it
// afterwards. It returns the function's error (unless caused by loss, ctx
// or a yield) with the pause before the next term, and the release's
// error.
func (s *Service) term(ctx context.Context, h *lease.Handle, b *backoff) (fnErr error, restartIn time.Duration, releaseErr error) {
	clock := s.client.Clock()
	s.set(holding, h, nil)
	defer s.set(holding, nil, nil)
	endCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), s.o.ReleaseTimeout)
	}

	// Renew until the function has returned, also after ctx ended: the
	// function may still be cleaning up under the lease. Its own context
	// ends at the loss, when ctx ends or at a yield, whichever comes first.
	m, err := h.StartManaged(context.WithoutCancel(ctx))
	if err != nil {
		// The lease ended before the term began (the local deadline
		// passed since the acquire): no term; free the key and campaign
		// again.
		rctx, rcancel := endCtx()
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

	var preferred <-chan string
	if s.o.YieldToPreferred {
		var unwatch func()
		preferred, unwatch = s.watchPreferred(fctx, h.Token())
		defer unwatch()
	}

	began := clock.Now()
	done := make(chan error, 1)
	go func() {
		done <- s.safeCall(fctx, h)
	}()
	lostSeen := false
	lostCh := m.Lost()
	yieldTo := ""
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-lostCh:
			lostCh = nil
			s.leader.Store(false)
			lostSeen = true
			s.notify(Transition{Kind: Lost, Key: s.key, Token: h.Token(), Err: m.Err()})
		case yieldTo = <-preferred:
			preferred = nil
			cancel(ErrYielded) // the next safe point is when the function returns
		}
	}
	s.leader.Store(false)
	if fctx.Err() != nil {
		err = nil // the function stopped because the lease was lost, ctx ended or it yielded
	}
	if err != nil {
		if !s.o.StopOnError {
			restartIn = b.next(s.o, clock.Now().Sub(began))
		}
		s.notify(Transition{Kind: Failed, Key: s.key, Token: h.Token(), Err: err, RestartIn: restartIn})
	} else {
		b.failures = 0
	}

	// Stop renewing, then hand off or release. Release even after a
	// loss: if the backend was only unreachable, it may still show this
	// acquisition, and releasing frees the key sooner.
	sctx, scancel := endCtx()
	_ = m.Stop(sctx)
	scancel()
	lost := m.Err() != nil
	var candidates []string
	switch {
	case lost:
	case yieldTo != "":
		candidates = []string{yieldTo}
	case ctx.Err() != nil:
		candidates = s.successors(ctx, h.Token())
	}
	var handOffErr error
	released := false // the hand-off ended the acquisition, or showed it over
	if len(candidates) > 0 {
		handOffErr, releaseErr, released = s.handOff(ctx, h, candidates)
		if handOffErr == nil && releaseErr == nil && released {
			s.notify(Transition{Kind: HandedOff, Key: s.key, Token: h.Token(), Candidates: candidates})
			return err, restartIn, nil
		}
	}
	if !released {
		rctx, rcancel := endCtx()
		releaseErr = h.Release(rctx)
		rcancel()
	}
	if lost {
		releaseErr = nil // the acquisition was already over; nothing to report
		if !lostSeen {   // lost after the function returned, before the release
			s.notify(Transition{Kind: Lost, Key: s.key, Token: h.Token(), Err: m.Err()})
		}
		return err, restartIn, nil
	}
	s.notify(Transition{Kind: Released, Key: s.key, Token: h.Token(), Err: releaseErr, Candidates: candidates, HandOffErr: handOffErr})
	return err, restartIn, releaseErr
}

// successors returns the candidates of a hand-off at shutdown: the key's
// preferred candidate, if it is not this replica, else Options.Successors.
// It reads the key only from a backend that can hand it off.
func (s *Service) successors(ctx context.Context, token lease.Token) []string {
	if _, ok := s.client.Backend().(lease.HandOffer); ok {
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.ReleaseTimeout)
		r, err := s.client.Inspect(ictx, s.key)
		cancel()
		if err == nil && r.Held && r.Token == token && r.Preferred != "" && r.Preferred != s.client.Owner() {
			return []string{r.Preferred}
		}
	}
	return s.o.Successors
}

// handOff hands h off to candidates. done reports that the acquisition is
// over: handed off (handOffErr and releaseErr nil), or found lost
// (releaseErr says how). If done is false, the handle is still to be
// released; handOffErr says why it was not handed off.
func (s *Service) handOff(ctx context.Context, h *lease.Handle, candidates []string) (handOffErr, releaseErr error, done bool) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.ReleaseTimeout)
	defer cancel()
	err := h.HandOff(hctx, lease.Offer{Candidates: candidates, Window: s.o.HandOffWindow})
	switch {
	case err == nil:
		return nil, nil, true
	case errors.Is(err, errors.ErrUnsupported), errors.Is(err, lease.ErrInvalidOffer):
		return err, nil, false // nothing was sent: release the handle
	case errors.Is(err, lease.ErrLost):
		return err, err, true // as a release would have found
	}
	// The outcome is unknown, or the backend failed, and the handle was
	// released locally: release the acquisition on the backend itself. A
	// refusal as handed off means the hand-off did happen.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.ReleaseTimeout)
	defer rcancel()
	rerr := s.b.Backend.Release(rctx, s.b.lastOffered())
	var le *lease.LostError
	if errors.As(rerr, &le) && le.Reason == lease.HandedOff {
		return nil, nil, true
	}
	if rerr != nil {
		rerr = fmt.Errorf("leaseservice: release after a failed hand-off: %w", rerr)
	}
	return err, rerr, true
}

// watchPreferred observes the key while the term with token lasts, and
// sends on the channel it returns the first preferred candidate other
// than this replica that it sees while the term holds the key. The
// returned func stops it and waits for it to end.
func (s *Service) watchPreferred(ctx context.Context, token lease.Token) (<-chan string, func()) {
	ctx, cancel := context.WithCancel(ctx)
	found := make(chan string, 1)
	ended := make(chan struct{})
	po := s.policy.Options()
	go func() {
		defer close(ended)
		for o, err := range s.caller.Observe(ctx, s.key, lease.ObserveOptions{OperationTimeout: po.OperationTimeout}) {
			if err != nil {
				continue // Observe tries again
			}
			if o.Held && o.Token == token && o.Preferred != "" && o.Preferred != s.client.Owner() {
				found <- o.Preferred
				return
			}
		}
	}()
	return found, func() { cancel(); <-ended }
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
