package leasequeue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/golib/lease/lease"
)

// A Claim is one worker's attempt at one item, under the item's own lease.
// The lease is renewed in the background until the claim is completed,
// failed or released; exactly one of Complete, Fail and Release must be
// called (Queue.Run does it for its handler). A Claim is safe for
// concurrent use.
//
// Complete and Fail are fenced writes: the source refuses them with a
// *fence.StaleError once another worker has claimed the item with a newer
// token, so a worker that lost its claim (paused past its lease, cut off
// from the backend) can never complete or fail the item.
type Claim struct {
	q       *Queue
	id      string
	h       *lease.Handle
	m       *lease.Managed
	attempt int
	claimed time.Time

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu     sync.Mutex
	closed bool
}

// ID returns the item's ID.
func (c *Claim) ID() string { return c.id }

// Key returns the item's lease key.
func (c *Claim) Key() string { return c.h.Key() }

// Attempt returns the number of attempts at the item, this one included.
func (c *Claim) Attempt() int { return c.attempt }

// Snapshot returns the coordinates of the claim's lease, for writes of
// your own that must be fenced by it (see package fence).
func (c *Claim) Snapshot() lease.Snapshot { return c.h.Snapshot() }

// Context returns a context that is cancelled when the claim's lease is
// lost (with a cause wrapping lease.ErrLost), when the claim is closed
// (cause ErrClosed), or, under Queue.Run, when Run's context ends (with its
// cause). Do the item's work under it.
func (c *Claim) Context() context.Context { return c.ctx }

// Lost returns a channel that is closed when the claim's lease is lost.
func (c *Claim) Lost() <-chan struct{} { return c.m.Lost() }

// Err returns the *lease.LostError that ended the claim's lease, or nil.
func (c *Claim) Err() error { return c.m.Err() }

// Complete marks the item done with a write fenced by the claim's token,
// which ends the claim. It returns nil if the item is recorded done; a
// *lease.LostError if the claim's lease is known to be lost (nothing is
// written); a *fence.StaleError if another worker has claimed the item
// since (nothing is written, and the item keeps the new owner's state); an
// error matching ErrClosed if the claim was already closed; or the
// source's error, which may match lease.ErrIndeterminate when the outcome
// is unknown.
func (c *Claim) Complete(ctx context.Context) error {
	return c.complete(ctx, func(ctx context.Context, snap lease.Snapshot) error {
		return c.q.src.completeItem(ctx, snap, c.id)
	})
}

// complete runs a completion write under the claim, as Complete does.
func (c *Claim) complete(ctx context.Context, write func(context.Context, lease.Snapshot) error) error {
	if !c.close() {
		return c.closedError()
	}
	err := c.check()
	if err == nil {
		err = write(ctx, c.h.Snapshot())
	}
	c.end(ctx, mustRelease(err))
	c.q.emit(&Completed{EventInfo: c.info(err), Attempt: c.attempt})
	return err
}

// Fail records the failed attempt with a write fenced by the claim's
// token, which ends the claim. The item goes to the dead-letter state
// if this was attempt Options.MaxAttempts, and is pending again after
// Options.RetryDelay otherwise. Errors are as for Complete.
func (c *Claim) Fail(ctx context.Context, cause error) error {
	if cause == nil {
		cause = errors.New("leasequeue: Fail called with a nil error")
	}
	return c.fail(ctx, c.q.failure(c.attempt, cause))
}

func (c *Claim) fail(ctx context.Context, f failRecord) error {
	if !c.close() {
		return c.closedError()
	}
	err := c.check()
	if err == nil {
		err = c.q.src.failItem(ctx, c.h.Snapshot(), c.id, f)
	}
	c.end(ctx, mustRelease(err))
	e := &Failed{EventInfo: c.info(err), Attempt: c.attempt, Cause: f.Err, Dead: f.Dead}
	if !f.Dead {
		e.RetryAfter = f.RetryAfter
	}
	c.q.emit(e)
	return err
}

// Release gives the item back without an outcome: the lease is released
// and the item may be claimed again at once (the attempt stays counted).
// It returns the lease's release error, if any (a *lease.LostError if the
// lease was already lost).
func (c *Claim) Release(ctx context.Context) error {
	if !c.close() {
		return c.closedError()
	}
	err := c.h.Release(ctx) // shows the item again at once
	c.end(ctx, false)
	return err
}

// abandon stops renewing without releasing or writing anything, as a
// crashed worker would.
func (c *Claim) abandon() {
	if c.close() {
		c.q.track.Remove(c.h)
		_ = c.m.Stop(context.Background())
		c.cancel(ErrClosed)
	}
}

// close marks the claim closed and reports whether it was open.
func (c *Claim) close() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.closed
	c.closed = true
	return !was
}

func (c *Claim) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *Claim) closedError() error {
	return fmt.Errorf("%w: item %q, token %d", ErrClosed, c.id, c.h.Token())
}

// check returns the loss of the claim's lease, if it is known locally:
// reported by the renewer, or a local deadline that has passed.
func (c *Claim) check() error {
	if err := c.m.Err(); err != nil {
		return err
	}
	if !c.q.clock.Now().Before(c.h.Deadline()) {
		return &lease.LostError{Key: c.h.Key(), Token: c.h.Token(), Reason: lease.DeadlinePassed}
	}
	return nil
}

// mustRelease reports whether the claim must still be released after a
// Complete or Fail whose write returned err: the write ends the claim
// itself, so only if it did not succeed.
func mustRelease(err error) bool { return err != nil }

// end stops tracking and renewing the claim, releasing its lease first if
// release is set, and cancels its context.
func (c *Claim) end(ctx context.Context, release bool) {
	c.q.track.Remove(c.h)
	if release {
		_ = c.h.Release(detach(ctx)) // bounded by OperationTimeout; a lost lease just says so
	}
	// The renewer ends at once unless a renewal is in flight (see
	// lease.Managed.Stop): only then is there something to wait for,
	// bounded by OperationTimeout.
	_ = c.m.Stop(ended)
	select {
	case <-c.m.Done():
	default:
		sctx, cancel := context.WithTimeout(detach(ctx), c.h.Policy().Options().OperationTimeout)
		_ = c.m.Stop(sctx)
		cancel()
	}
	c.cancel(ErrClosed)
}

// ended is a context that has ended, for a Stop that must not wait.
var ended = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// lost records the loss err of the claim's lease, if err is not nil, and
// emits the Lost event.
func (c *Claim) lost(err error) {
	if err != nil {
		c.q.track.Lost(c.h, err, c.q.clock.Now())
		c.q.emit(&Lost{EventInfo: c.info(err)})
	}
}

// itemObserver is the observer of a Queue's client of its source's
// claims: it passes every event on, and on the loss of a tracked claim's
// lease cancels the claim's context with the loss and emits the claim's
// Lost event, on the renewer's goroutine before Managed.Lost closes.
type itemObserver struct {
	next lease.Observer
	q    *Queue
}

func (o itemObserver) Observe(e lease.Event) {
	o.next.Observe(e)
	if l, ok := e.(*lease.Lost); ok {
		if c := o.q.track.Find(l.Key, l.Token); c != nil {
			c.cancel(l.Err)
			c.lost(l.Err)
		}
	}
}

// info returns the fields of the claim's events.
func (c *Claim) info(err error) EventInfo {
	return EventInfo{
		Name: c.q.o.Name, Worker: c.q.client.Owner(), ID: c.id, Key: c.h.Key(), Token: c.h.Token(),
		Latency: c.q.clock.Now().Sub(c.claimed), Err: err,
	}
}
