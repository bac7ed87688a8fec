package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// opContext is the context of one backend call: its parent's values and
// cancellation, bounded by a deadline (OperationTimeout from the call's
// start, on real time, as context.WithTimeout would). It exists because
// context.WithTimeout costs four allocations and a timer per call, twice
// per acquire→release cycle, whether or not the backend ever waits on
// Done: an opContext is one value, embedded in the Handle for the
// cycle's two calls, and it makes its Done channel, and takes a timer
// from a pool, only when a backend asks for Done (valkey-go does for a
// request that is pipelined with others). A backend that checks Err, or
// bounds its I/O by Deadline as valkey-go does for a lone request, never
// pays for them.
//
// It keeps context.Context's contract: Done returns the same channel on
// every call, closed once Err is non-nil; Err is nil until the deadline
// passes, the parent ends, or end is called, and then stays the same
// value (DeadlineExceeded, the parent's error, or Canceled). end, called
// once the backend returned, is the CancelFunc: it frees the timer and
// the watch on the parent.
//
// An opContext must not be copied after first use; begin re-arms one for
// a new call only before any backend has seen it.
type opContext struct {
	parent   context.Context
	deadline time.Time

	mu         sync.Mutex
	done       chan struct{} // made by Done
	err        error         // set once; done (if made) is closed with it
	timer      *opTimer      // fires at deadline; taken by Done
	stopParent func() bool   // ends the watch on parent; made by Done
	// Functions registered by AfterFunc, run when c ends: the first in
	// first (pgx registers one per query), the others in afters.
	first     func()
	firstUsed bool // first was taken once; it is never reused
	afters    []*func()
}

// begin prepares c for a call under parent, bounded by timeout from
// start, a reading of the system clock (Client.realNow) taken as the call
// began.
func (c *opContext) begin(parent context.Context, start time.Time, timeout time.Duration) *opContext {
	c.parent, c.deadline = parent, start.Add(timeout)
	return c
}

// newOp returns a fresh opContext for a call that has no Handle to live
// in (one allocation, against context.WithTimeout's four).
func newOp(parent context.Context, start time.Time, timeout time.Duration) *opContext {
	return new(opContext).begin(parent, start, timeout)
}

// Deadline returns the earlier of the call's and the parent's deadline.
func (c *opContext) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Value returns the parent's value for key.
func (c *opContext) Value(key any) any { return c.parent.Value(key) }

// Err returns nil while the call may go on, and then why it may not.
func (c *opContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		if err := c.parent.Err(); err != nil {
			c.endLocked(err)
		} else if !time.Now().Before(c.deadline) {
			c.endLocked(context.DeadlineExceeded)
		}
	}
	return c.err
}

// Done returns a channel that is closed when Err turns non-nil. The first
// call starts a timer for the deadline and watches the parent.
func (c *opContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	c.done = make(chan struct{})
	if c.err != nil {
		close(c.done)
		return c.done
	}
	if err := c.parent.Err(); err != nil {
		c.endLocked(err)
		return c.done
	}
	d := time.Until(c.deadline)
	if d <= 0 {
		c.endLocked(context.DeadlineExceeded)
		return c.done
	}
	c.timer = armOpTimer(c, d)
	if c.parent.Done() != nil {
		c.stopParent = context.AfterFunc(c.parent, c.parentEnded)
	}
	return c.done
}

// An opTimer is a timer that ends the opContext it is armed for when the
// context's deadline passes. Disarmed timers wait in opTimers for the next
// opContext, so that a Done costs no timer (two allocations: the timer
// and the method value it would call) per backend call.
type opTimer struct {
	t *time.Timer
	c atomic.Pointer[opContext] // the context the timer is armed for
}

var opTimers sync.Pool

// init sets opTimers.New here, not in opTimers' declaration, whose
// initialization would otherwise refer to itself (through fire, which
// ends a context, which puts its timer back).
func init() {
	opTimers.New = func() any {
		t := new(opTimer)
		t.t = time.AfterFunc(time.Hour, t.fire)
		t.t.Stop()
		return t
	}
}

// armOpTimer returns a timer that ends c in d.
func armOpTimer(c *opContext, d time.Duration) *opTimer {
	t := opTimers.Get().(*opTimer)
	t.c.Store(c)
	t.t.Reset(d)
	return t
}

// fire ends the context t is armed for. It runs at most once per arming:
// a timer goes back to opTimers only after Stop reported that this
// arming's fire will never run.
func (t *opTimer) fire() {
	if c := t.c.Load(); c != nil {
		c.expire()
	}
}

// disarm stops t. If fire may already be running, t is left to the
// garbage collector rather than re-armed for another context.
func (t *opTimer) disarm() {
	if t.t.Stop() {
		t.c.Store(nil)
		opTimers.Put(t)
	}
}

// AfterFunc arranges to call f in its own goroutine once c ends, as
// context.AfterFunc does. context.AfterFunc and context.WithCancel find
// this method and use it, instead of starting a goroutine per call to
// wait for Done (pgx watches every query's context with AfterFunc). stop
// unregisters f; it reports whether it stopped f from being run.
func (c *opContext) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	if !c.firstUsed {
		c.first, c.firstUsed = f, true
		return c.stopFirst
	}
	r := &f
	c.afters = append(c.afters, r)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.afters {
			if x == r {
				c.afters = append(c.afters[:i], c.afters[i+1:]...)
				return true
			}
		}
		return false
	}
}

// stopFirst is the stop function of the first AfterFunc registration.
func (c *opContext) stopFirst() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	stopped := c.first != nil
	c.first = nil
	return stopped
}

func (c *opContext) String() string { return "lease.opContext" }

func (c *opContext) expire() { c.endWith(context.DeadlineExceeded) }

func (c *opContext) parentEnded() { c.endWith(c.parent.Err()) }

// end cancels c once the backend call returned, as a CancelFunc would.
func (c *opContext) end() { c.endWith(context.Canceled) }

func (c *opContext) endWith(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.endLocked(err)
	}
}

// endLocked records err, closes done if made, and stops the timer and the
// watch on the parent. c.mu is held and c.err is nil.
func (c *opContext) endLocked(err error) {
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	if c.timer != nil {
		c.timer.disarm()
		c.timer = nil
	}
	if c.stopParent != nil {
		c.stopParent()
	}
	if c.first != nil {
		go c.first()
		c.first = nil
	}
	for _, f := range c.afters {
		go (*f)()
	}
	c.afters = nil
}
