package lease

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Managed renews a Handle's lease in the background and says when it is
// lost. Create one with Handle.StartManaged. Its methods are safe for
// concurrent use.
//
// It renews RenewEvery (shortened by up to 20% of jitter) after the last
// confirmed acquire or renew was sent, so a renewer started late renews at
// once. A renewal that fails with a transient error is retried every Retry
// until the local deadline; the lease is lost the moment the backend says
// this acquisition is no longer current, or when the local deadline passes
// without a confirmed renewal, even if a backend call is still in flight
// then. On loss, and only then, Managed records the error
// (Err), closes Lost, cancels Context with the error as its cause and emits
// a Lost event.
type Managed struct {
	h         *Handle
	ctx       context.Context
	cancelCtx context.CancelCauseFunc
	lost      chan struct{}
	done      chan struct{}

	mu       sync.Mutex
	err      error
	lastErr  error       // the last transient renewal error, for the watchdog
	watchdog *time.Timer // fires at the local deadline while a renewal is in flight
	// wake, if not nil, starts the renewal goroutine when the first
	// renewal is due (see StartManaged); until then (asleep) no goroutine
	// exists, and cancel ends the renewer itself.
	wake   *time.Timer
	asleep bool
}

// StartManaged starts renewing the lease in the background and returns the
// renewer. The renewer stops when ctx ends, when Stop is called, when the
// handle is released, or when the lease is lost.
//
// It starts nothing and returns an error reading
// lease: manage "key": <cause> when renewing cannot help:
//
//   - the handle was released: the error matches ErrLost and ErrReleased;
//   - the lease is already known lost (a Renew or Validate of this handle,
//     or its earlier renewer, found it gone): the error matches ErrLost,
//     and errors.As finds the *LostError saying why;
//   - the local deadline has passed: the error matches ErrLost, with
//     Reason DeadlinePassed (the lease may still be held on the backend,
//     but this client no longer vouches for it: acquire anew);
//   - the handle already has a renewer: the error matches
//     ErrAlreadyManaged (a Handle is renewed by at most one Managed in its
//     life, even after that one stopped);
//   - ctx is done: the error matches ctx's cause.
//
// The checks run in that order. StartManaged is safe for concurrent use
// with every other method of the handle.
func (h *Handle) StartManaged(ctx context.Context) (*Managed, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var err error
	switch {
	case h.released:
		err = h.releasedError()
	case h.lost != nil:
		err = h.lost
	case !h.c.clock.Now().Before(h.deadline):
		err = &LostError{Key: h.key, Token: h.token, Reason: DeadlinePassed}
	case h.managed != nil:
		err = ErrAlreadyManaged
	case ctx.Err() != nil:
		err = context.Cause(ctx)
	}
	if err != nil {
		return nil, h.wrap("manage", err)
	}
	m := &Managed{h: h, lost: make(chan struct{}), done: make(chan struct{})}
	m.ctx, m.cancelCtx = context.WithCancelCause(ctx)
	h.managed = m
	wait := m.due(h.deadline)
	if h.c.sysClock && ctx.Done() == nil {
		// Most handles are released or stopped long before their first
		// renewal (a work item, a short job): start no goroutine until
		// that renewal is due. Only cancel can end the renewer meanwhile,
		// as ctx never ends, and it does so itself. On the system clock
		// only, whose timers time.AfterFunc makes; other clocks' timers
		// need a goroutine to wait on them.
		m.asleep = true
		m.wake = time.AfterFunc(wait, m.wakeUp)
		return m, nil
	}
	go m.run(wait)
	return m, nil
}

// wakeUp runs on its own goroutine when the first renewal of a renewer
// started asleep is due, and becomes the renewal goroutine, unless cancel
// ended the renewer first.
func (m *Managed) wakeUp() {
	m.mu.Lock()
	asleep := m.asleep
	m.asleep = false
	m.mu.Unlock()
	if asleep {
		m.run(0)
	}
}

// cancel cancels the renewer's context with cause, and ends a renewer that
// is still asleep as its goroutine would have: with the check that stopped
// makes, except after Release (cause ErrReleased), which calls cancel with
// the handle's lock held, and skips that check. Once the goroutine runs, it
// sees the context end and ends itself.
func (m *Managed) cancel(cause error) {
	m.cancelCtx(cause)
	m.mu.Lock()
	asleep := m.asleep
	m.asleep = false
	m.mu.Unlock()
	if !asleep {
		return
	}
	m.wake.Stop() // if it fired already, wakeUp finds the renewer awake and returns
	if cause != ErrReleased {
		m.stopped(nil)
	}
	close(m.done)
}

// Lost returns a channel that is closed when the lease is lost, after Err
// is set, Context is cancelled and the Lost event was emitted (so an
// Observer must not wait on Lost or call Stop: it runs on the renewer's
// goroutine before the channel closes). It is not closed by Release, nor
// by Stop unless the lease was lost before Stop (see Stop). Successive
// calls return the same channel.
func (m *Managed) Lost() <-chan struct{} { return m.lost }

// Context returns a context that is cancelled when the renewer stops: with
// a cause wrapping ErrLost on loss, ErrStopped after Stop, ErrReleased after
// Release, or the cause of the context given to StartManaged. Run the work
// the lease protects under it.
func (m *Managed) Context() context.Context { return m.ctx }

// Err returns the error that ended the lease, or nil if the lease was not
// lost. It matches ErrLost, errors.As finds its *LostError (with the
// Reason), and it reads lease: renew "key": token 7 lost: <reason>. Once
// set it never changes.
func (m *Managed) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Handle returns the handle being renewed.
func (m *Managed) Handle() *Handle { return m.h }

// Stop stops renewing and waits, bounded by ctx, for an in-flight renewal
// to finish. It does not release the lease: call Handle.Release for that.
// Both orders are safe; the documentation uses one, Stop then Release
// (defer Release right after the acquisition, defer Stop after
// StartManaged), because Stop's error says whether the lease held while
// the work ran. It returns ctx's error if the
// wait was cut short, the loss error if the lease was lost before Stop, and
// nil otherwise. Stop may be called more than once.
//
// A local deadline that had passed when the renewer stopped (by Stop, or
// because the context given to StartManaged ended) is a loss, even if the
// renewer had not noticed it yet because it had not run since (the process
// was paused, or the machine busy): it is recorded as a loss with reason
// DeadlinePassed, with the Lost event, as the renewer would have. Only
// Release stops the renewer without that check.
//
// Stop does not wait when no renewal is in flight and the renewer has not
// run yet (it starts no goroutine until the first renewal is due, on the
// system clock and when the context given to StartManaged cannot end): it
// returns without reading ctx then, even if ctx is done.
func (m *Managed) Stop(ctx context.Context) error {
	m.cancel(ErrStopped)
	select {
	case <-m.done:
		return m.Err()
	default:
	}
	select {
	case <-m.done:
		return m.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done returns a channel that is closed when the renewer has ended, for
// whatever reason, and its goroutine, if it had started one, has exited.
func (m *Managed) Done() <-chan struct{} { return m.done }

// due returns how long from now the next renewal is due, given the local
// deadline: RenewEvery (with jitter) after the last confirmed acquire or
// renew was sent, whose send time is the deadline less the local lifetime.
// Not after it returned, nor after StartManaged: a slow renewal or a late
// start must not eat into the room the policy leaves for retries.
func (m *Managed) due(deadline time.Time) time.Duration {
	p := m.h.policy
	return deadline.Add(jitter(p.o.RenewEvery) - p.LocalLifetime()).Sub(m.h.c.clock.Now())
}

func (m *Managed) run(wait time.Duration) {
	defer close(m.done)
	h, clock, o := m.h, m.h.c.clock, m.h.policy.o
	var last error // the last transient error
	// One timer for the renewer's life, armed for each renewal, so that
	// the watchdog costs no allocation per renewal.
	m.watchdog = time.AfterFunc(time.Hour, m.watchdogFired)
	m.watchdog.Stop()
	defer m.watchdog.Stop()
	for {
		t := clock.NewTimer(wait)
		select {
		case <-m.ctx.Done():
			t.Stop()
			m.stopped(last)
			return
		case <-t.C():
		}
		if !clock.Now().Before(h.Deadline()) {
			m.lose(&LostError{Key: h.key, Token: h.token, Reason: DeadlinePassed, Err: last})
			return
		}
		m.mu.Lock()
		m.lastErr = last
		m.mu.Unlock()
		err := h.renew(m.ctx, m.watchdog)
		if m.ctx.Err() != nil {
			m.stopped(last) // stopped or released while renewing
			return
		}
		var lost *LostError
		switch {
		case err == nil:
			wait, last = m.due(h.Deadline()), nil
		case errors.As(err, &lost):
			m.lose(err)
			return
		default:
			// Keep the error that says why renewals fail: a timeout (the
			// last attempt is cut short at the local deadline) says less
			// than the refusal or transport error before it.
			if last == nil || !errors.Is(err, context.DeadlineExceeded) {
				last = err
			}
			left := h.Deadline().Sub(clock.Now())
			if left <= 0 {
				m.lose(&LostError{Key: h.key, Token: h.token, Reason: DeadlinePassed, Err: last})
				return
			}
			wait = min(jitter(o.Retry), left)
		}
	}
}

// watchdogFired runs when the local deadline passes while a renewal is in
// flight: a backend that does not return when its context ends must not
// keep the renewer acting as holder past the deadline.
func (m *Managed) watchdogFired() {
	h := m.h
	if m.ctx.Err() != nil || h.c.clock.Now().Before(h.Deadline()) {
		return // stopped, released, or renewed meanwhile
	}
	m.mu.Lock()
	last := m.lastErr
	m.mu.Unlock()
	if last == nil {
		last = context.DeadlineExceeded
	}
	m.lose(&LostError{Key: h.key, Token: h.token, Reason: DeadlinePassed, Err: last})
}

// stopped is called when the renewer stops because its context ended: a
// local deadline that had passed by then is a loss nobody had noticed yet,
// unless the handle was released.
func (m *Managed) stopped(last error) {
	h := m.h
	if errors.Is(context.Cause(m.ctx), ErrReleased) || h.c.clock.Now().Before(h.Deadline()) {
		return
	}
	m.lose(&LostError{Key: h.key, Token: h.token, Reason: DeadlinePassed, Err: last})
}

// lose records the loss err, once: a later call does nothing. err is a
// *LostError, or one wrapped by renew.
func (m *Managed) lose(err error) {
	if _, ok := err.(*opError); !ok {
		err = m.h.wrap("renew", err)
	}
	m.h.noteLost(err)
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return
	}
	m.err = err
	m.mu.Unlock()
	// Cancel before closing Lost, so that whoever sees Lost closed finds
	// Err set and the context cancelled with its cause.
	m.cancel(err)
	// The event before Lost closes, so that whoever sees Lost closed can
	// count on the observer having been told.
	h := m.h
	info := h.info()
	info.Err = err
	h.c.obs.Observe(&Lost{info})
	close(m.lost)
}
