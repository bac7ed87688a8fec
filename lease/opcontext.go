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
// cycle's two calls, and it makes its Done channel, and takes a watch
// (a timer and the parent's AfterFunc) from a pool, only when a backend
// asks for Done (valkey-go does for a request that is pipelined with
// others, pgx for every query). A backend that checks Err, or bounds its
// I/O by Deadline as valkey-go does for a lone request, never pays for
// them. When the parent's own deadline comes first, the parent bounds the
// call already, and an opContext is only the parent (passThrough), so
// that a caller who set a short deadline pays for no second one.
//
// The first attempt of an acquire and a release, the two calls of a
// cycle, go further under a parent that can never end when they overlap
// other calls of the client (beginShared): they share a context, and with
// it its timer and Done channel, with the calls that started close before
// them, at the price of ending up to sharedSlack after their own deadline
// (see PolicyOptions.OperationTimeout).
//
// It keeps context.Context's contract: Done returns the same channel on
// every call, closed once Err is non-nil; Err is nil until the deadline
// passes, the parent ends, or end is called, and then stays the same
// value (DeadlineExceeded, the parent's error, or Canceled). end, called
// once the backend returned, is the CancelFunc: it frees the watch. A
// passThrough opContext answers as its parent does, before and after
// end.
//
// An opContext must not be copied after first use; begin re-arms one for
// a new call only before any backend has seen it.
type opContext struct {
	parent   context.Context
	deadline time.Time
	// passThrough: parent's own deadline comes no later than deadline, so
	// parent bounds the call already; c is then parent and nothing more,
	// and its end does nothing. Set by begin, read-only after.
	passThrough bool
	// shared, if not nil, holds a context that ends at most
	// sharedSlack(the timeout) after deadline and is shared with the calls
	// whose deadlines fall just before its own (see sharedDeadlines): c
	// then answers Done, Err, Deadline and AfterFunc as shared.ctx does,
	// and Value as shared.ctx and then parent do, and its end lets go of
	// shared. Only a parent that can never end gets one (beginShared).
	// Set by begin, read-only after.
	shared *sharedDeadline
	// counted, if not nil, counts c among its calls in flight until end
	// (beginShared). Set by begin, read-only after.
	counted *sharedDeadlines
	// left: end let go of counted (and of shared). Read and written by
	// end only, so that a second end does nothing.
	left bool

	mu         sync.Mutex
	done       chan struct{} // made by Done
	err        error         // set once; done (if made) is closed with it
	watch      *opWatch      // ends c at deadline or with parent; taken by Done
	stopParent func() bool   // ends the parent's AfterFunc for watch
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
	c.parent, c.deadline, c.shared, c.counted, c.left = parent, start.Add(timeout), nil, nil, false
	d, ok := parent.Deadline()
	c.passThrough = ok && !d.After(c.deadline)
	return c
}

// beginShared is begin, but a call under a parent that can never end (its
// Done is nil, as context.Background's and context.WithoutCancel's are)
// is bounded by a context of s, shared with other calls, which ends at
// most sharedSlack(timeout) after the call's own deadline: a call then
// costs neither a Done channel nor a timer of its own, even when its
// backend waits on Done (valkey-go does for a pipelined request, pgx for
// every query). Calls under a parent that can end get their own watch, as
// begin gives them, since each would need the parent watched anyway. So
// does a call that no other call of s overlaps: one at a time, a shared
// context would serve a handful of calls, and making one costs more than
// the pooled watch those calls would take (s.inFlight counts the calls).
func (c *opContext) beginShared(s *sharedDeadlines, parent context.Context, start time.Time, timeout time.Duration) *opContext {
	c.begin(parent, start, timeout)
	if !c.passThrough && parent.Done() == nil {
		c.counted = s
		if s.inFlight.Add(1) > 1 {
			c.shared = s.get(c.deadline, timeout)
		}
	}
	return c
}

// newOp returns a fresh opContext for a call that has no Handle to live
// in (one allocation, against context.WithTimeout's four).
func newOp(parent context.Context, start time.Time, timeout time.Duration) *opContext {
	return new(opContext).begin(parent, start, timeout)
}

// Deadline returns the earlier of the call's and the parent's deadline.
func (c *opContext) Deadline() (time.Time, bool) {
	if c.shared != nil {
		return c.shared.ctx.Deadline()
	}
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Value returns the parent's value for key. A shared context, which
// carries no values of its own, answers first: the context package finds
// the cancellation it can join through Value (context.AfterFunc and
// context.WithCancel under c then join shared's directly), and no key of
// the caller's can reach shared's.
func (c *opContext) Value(key any) any {
	if c.shared != nil {
		if v := c.shared.ctx.Value(key); v != nil {
			return v
		}
	}
	return c.parent.Value(key)
}

// Err returns nil while the call may go on, and then why it may not.
func (c *opContext) Err() error {
	if c.shared != nil {
		return c.shared.ctx.Err()
	}
	if c.passThrough {
		return c.parent.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		if err := c.parent.Err(); err != nil {
			c.endLocked(err)
		} else if time.Until(c.deadline) <= 0 { // one clock read; time.Now makes two
			c.endLocked(context.DeadlineExceeded)
		}
	}
	return c.err
}

// Done returns a channel that is closed when Err turns non-nil. The first
// call arms a watch: a timer for the deadline, and the parent's AfterFunc.
func (c *opContext) Done() <-chan struct{} {
	if c.shared != nil {
		return c.shared.ctx.Done()
	}
	if c.passThrough {
		return c.parent.Done()
	}
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
	c.watch = armOpWatch(c, d)
	return c.done
}

// An opWatch ends the opContext it is armed for when the context's
// deadline passes (its timer) or its parent ends (parentEnded, which Done
// registers with context.AfterFunc). Disarmed watches wait in opWatches
// for the next opContext, so that a Done costs neither a timer nor the
// two method values the timer and the parent's AfterFunc would call: a
// third of what it cost, one channel and context.AfterFunc's own two
// allocations being left.
type opWatch struct {
	t           *time.Timer
	parentEnded func() // w.fireParent, bound once
	c           atomic.Pointer[opContext]
}

var opWatches sync.Pool

// init sets opWatches.New here, not in opWatches' declaration, whose
// initialization would otherwise refer to itself (through fire, which
// ends a context, which puts its watch back).
func init() {
	opWatches.New = func() any {
		w := new(opWatch)
		w.t = time.AfterFunc(time.Hour, w.fire)
		w.t.Stop()
		w.parentEnded = w.fireParent
		return w
	}
}

// armOpWatch returns a watch that ends c in d, and when c's parent ends
// if the parent can end. c.mu is held.
func armOpWatch(c *opContext, d time.Duration) *opWatch {
	w := opWatches.Get().(*opWatch)
	w.c.Store(c)
	w.t.Reset(d)
	if c.parent.Done() != nil {
		c.stopParent = context.AfterFunc(c.parent, w.parentEnded)
	}
	return w
}

// fire and fireParent end the context w is armed for. Each runs at most
// once per arming: a watch goes back to opWatches only after both the
// timer's Stop and the parent watch's stop reported that this arming's
// functions will never run. Each also checks its reason itself (the
// deadline passed, the parent ended), so that even a stray call could
// only end a context that should end; a timer that finds the deadline
// still ahead (it never should: both read the same monotonic clock) is
// armed again for the rest, so the deadline always ends the context.
func (w *opWatch) fire() {
	c := w.c.Load()
	if c == nil {
		return
	}
	if d := time.Until(c.deadline); d > 0 {
		w.t.Reset(d)
		return
	}
	c.endWith(context.DeadlineExceeded)
}

func (w *opWatch) fireParent() {
	if c := w.c.Load(); c != nil {
		if err := c.parent.Err(); err != nil {
			c.endWith(err)
		}
	}
}

// disarm stops w, and the watch on c's parent (stopParent, if any). If a
// function of w may already be running, w is left to the garbage
// collector rather than armed for another context.
func (w *opWatch) disarm(stopParent func() bool) {
	stopped := w.t.Stop()
	if stopParent != nil && !stopParent() {
		stopped = false
	}
	if stopped {
		w.c.Store(nil)
		opWatches.Put(w)
	}
}

// AfterFunc arranges to call f in its own goroutine once c ends, as
// context.AfterFunc does. context.AfterFunc and context.WithCancel find
// this method and use it, instead of starting a goroutine per call to
// wait for Done (pgx watches every query's context with AfterFunc). stop
// unregisters f; it reports whether it stopped f from being run.
func (c *opContext) AfterFunc(f func()) (stop func() bool) {
	if c.shared != nil {
		return context.AfterFunc(c.shared.ctx, f)
	}
	if c.passThrough {
		return context.AfterFunc(c.parent, f)
	}
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

// end cancels c once the backend call returned, as a CancelFunc would.
func (c *opContext) end() {
	if c.counted != nil && !c.left {
		c.left = true
		c.counted.inFlight.Add(-1)
		if c.shared != nil {
			c.shared.leave()
		}
	}
	if c.shared == nil && !c.passThrough {
		c.endWith(context.Canceled)
	}
}

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
	if c.watch != nil {
		c.watch.disarm(c.stopParent)
		c.watch, c.stopParent = nil, nil
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

// sharedDeadlines hands out contexts that end at a deadline, each shared
// by the calls whose own deadlines fall within sharedSlack before it, so
// that calls which start close together (at 64 goroutines, dozens per
// millisecond) share one timer and one Done channel. A call's context
// thus ends no earlier than its own deadline and at most sharedSlack
// later, or is cancelled once every call that used it has ended, so that
// no more timers wait in the runtime than there are calls in flight (a
// timer per millisecond of OperationTimeout would make every timer
// operation of the program dearer: the runtime scans its timer heap when
// timers are reset, as network deadlines are). The zero value is ready to
// use, and it is safe for concurrent use.
type sharedDeadlines struct {
	// One context per slot, the slot chosen by the timeout, so that calls
	// with two or three different timeouts do not keep replacing each
	// other's.
	slots [4]atomic.Pointer[sharedDeadline]
	// inFlight counts the calls begun by beginShared and not yet ended.
	inFlight atomic.Int64
}

// A sharedDeadline is a context shared by calls, and the count of its
// holders: each call that uses it, and its slot while it is the slot's.
// When the count drops to zero nobody can use or find it any more, and
// it is cancelled, which stops its timer.
type sharedDeadline struct {
	at     time.Time // ctx's deadline
	ctx    context.Context
	cancel context.CancelFunc
	refs   atomic.Int64
}

// join counts one more call using d, unless d has been let go of by all
// its holders already; it reports whether it did.
func (d *sharedDeadline) join() bool {
	for {
		n := d.refs.Load()
		if n == 0 {
			return false
		}
		if d.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// leave counts one holder less, and cancels ctx after the last.
func (d *sharedDeadline) leave() {
	if d.refs.Add(-1) == 0 {
		d.cancel()
	}
}

// sharedSlack returns how much later than its own deadline a call with
// the given timeout may end when its context is shared: a thousandth of
// the timeout, at most a millisecond.
func sharedSlack(timeout time.Duration) time.Duration {
	return min(timeout/1000, time.Millisecond)
}

// get returns a context, joined for one call, that ends no earlier than
// deadline and at most sharedSlack(timeout) later. The caller leaves it
// when its call ends.
func (s *sharedDeadlines) get(deadline time.Time, timeout time.Duration) *sharedDeadline {
	slot := &s.slots[(uint64(timeout)*0x9e3779b97f4a7c15)>>62]
	slack := sharedSlack(timeout)
	cur := slot.Load()
	if cur != nil && !cur.at.Before(deadline) && cur.at.Sub(deadline) <= slack && cur.join() {
		return cur
	}
	d := &sharedDeadline{at: deadline.Add(slack)}
	d.ctx, d.cancel = context.WithDeadline(context.Background(), d.at)
	d.refs.Store(2) // this call and the slot
	if slot.CompareAndSwap(cur, d) {
		if cur != nil {
			cur.leave() // the slot's hold
		}
	} else {
		// Another call replaced cur meanwhile: d serves this call only.
		d.leave()
	}
	return d
}
