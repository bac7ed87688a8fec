package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The tests of opContext hold it to context.Context's contract: Done is
// one channel, closed exactly when Err turns non-nil, and Err keeps its
// first value.

func TestOpContextEndIsCancel(t *testing.T) {
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")
	c := newOp(parent, time.Now(), time.Hour)
	if err := c.Err(); err != nil {
		t.Fatalf("Err before end = %v", err)
	}
	if d, ok := c.Deadline(); !ok || time.Until(d) < 59*time.Minute {
		t.Fatalf("Deadline = %v, %v; want about an hour from now", d, ok)
	}
	if c.Value(key{}) != "v" {
		t.Fatal("Value does not reach the parent's")
	}
	done := c.Done()
	select {
	case <-done:
		t.Fatal("Done closed before end")
	default:
	}
	c.end()
	c.end() // twice is harmless
	<-done
	if c.Done() != done {
		t.Fatal("Done returned another channel")
	}
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after end = %v, want context.Canceled", err)
	}
}

func TestOpContextDeadline(t *testing.T) {
	// With Done asked for, the timer closes it; without, Err notices.
	c := newOp(context.Background(), time.Now(), 5*time.Millisecond)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the deadline")
	}
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err = %v, want context.DeadlineExceeded", err)
	}
	c.end()
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err after end = %v, want it to stay context.DeadlineExceeded", err)
	}

	c = newOp(context.Background(), time.Now(), time.Millisecond)
	time.Sleep(2 * time.Millisecond)
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err past the deadline without Done = %v, want context.DeadlineExceeded", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done made after Err turned non-nil is not closed")
	}
}

func TestOpContextParent(t *testing.T) {
	cause := errors.New("shutting down")
	parent, cancel := context.WithCancelCause(context.Background())
	c := newOp(parent, time.Now(), time.Hour)
	done := c.Done()
	cancel(cause)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed when the parent was cancelled")
	}
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err = %v, want the parent's context.Canceled", err)
	}
	c.end()

	// A parent that already ended: Err says so before any Done.
	c = newOp(parent, time.Now(), time.Hour)
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err under an ended parent = %v", err)
	}
	c.end()

	// The earlier deadline wins.
	soon, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	c = newOp(soon, time.Now(), time.Hour)
	pd, _ := soon.Deadline()
	if d, ok := c.Deadline(); !ok || !d.Equal(pd) {
		t.Fatalf("Deadline = %v, want the parent's %v", d, pd)
	}
	c.end()
}

func TestOpContextConcurrent(t *testing.T) {
	// Run under -race: Done, Err, the timer and end from many goroutines.
	for range 50 {
		parent, cancel := context.WithCancel(context.Background())
		c := newOp(parent, time.Now(), time.Millisecond)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch i {
				case 0:
					<-c.Done()
				case 1:
					_ = c.Err()
				case 2:
					cancel()
				case 3:
					c.end()
				}
			}()
		}
		wg.Wait()
		<-c.Done()
		if c.Err() == nil {
			t.Fatal("Done closed with Err nil")
		}
		cancel()
	}
}

func TestOpContextAfterFunc(t *testing.T) {
	// context.AfterFunc and WithCancel use opContext's AfterFunc: f runs
	// once c ends, unless stopped first; a child ends with c.
	c := newOp(context.Background(), time.Now(), time.Hour)
	ran := make(chan struct{})
	context.AfterFunc(c, func() { close(ran) })
	stopped := context.AfterFunc(c, func() { t.Error("a stopped AfterFunc ran") })
	if !stopped() {
		t.Fatal("stop did not stop a function that had not run")
	}
	child, cancel := context.WithCancel(c)
	defer cancel()
	c.end()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterFunc's function did not run when the context ended")
	}
	select {
	case <-child.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a child context did not end with its parent")
	}
	// Registered after the end: runs at once.
	late := make(chan struct{})
	if stop := context.AfterFunc(c, func() { close(late) }); stop() {
		t.Fatal("stop stopped a function registered after the end")
	}
	<-late
}

func TestOpContextAfterFuncMany(t *testing.T) {
	// The first registration has a slot of its own: stopping it must not
	// stop a later one, and every unstopped one runs.
	c := newOp(context.Background(), time.Now(), time.Hour)
	var wg sync.WaitGroup
	wg.Add(2)
	stop1 := c.AfterFunc(func() { t.Error("the stopped first function ran") })
	c.AfterFunc(func() { wg.Done() })
	stop3 := c.AfterFunc(func() { t.Error("the stopped third function ran") })
	c.AfterFunc(func() { wg.Done() })
	if !stop1() || stop1() {
		t.Fatal("stop of the first registration: want true once, then false")
	}
	if !stop3() {
		t.Fatal("stop of the third registration did not stop it")
	}
	c.end()
	wg.Wait()
}

// TestOpContextTimerReuse ends many contexts whose timers were armed for a
// short deadline, so that their timers go back to the pool, and then
// checks that a context armed with one of them keeps its own deadline: a
// timer re-armed for a new context never fires for an old arming.
func TestOpContextTimerReuse(t *testing.T) {
	for range 100 {
		c := newOp(context.Background(), time.Now(), time.Millisecond)
		c.Done()
		c.end()
	}
	c := newOp(context.Background(), time.Now(), time.Hour)
	done := c.Done()
	time.Sleep(20 * time.Millisecond) // well past the old deadlines
	select {
	case <-done:
		t.Fatalf("Done closed an hour early: %v", c.Err())
	default:
	}
	c.end()
	<-done
	if err := c.Err(); err != context.Canceled {
		t.Fatalf("Err = %v, want context.Canceled", err)
	}
}

// TestOpContextParentWatchReuse ends contexts whose parents are still
// live, so that their watches go back to the pool, then cancels those
// parents while a later context uses one of the watches: the later
// context must not end, because the watch was unregistered from the old
// parents before it was reused.
func TestOpContextParentWatchReuse(t *testing.T) {
	var cancels []context.CancelFunc
	for range 100 {
		parent, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		c := newOp(parent, time.Now(), time.Hour)
		c.Done()
		c.end()
	}
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newOp(parent, time.Now(), time.Hour)
	done := c.Done()
	for _, cancel := range cancels {
		cancel()
	}
	time.Sleep(20 * time.Millisecond) // time for a stray AfterFunc to run
	select {
	case <-done:
		t.Fatalf("Done closed by another context's parent: %v", c.Err())
	default:
	}
	cancel()
	<-done
	if err := c.Err(); err != context.Canceled {
		t.Fatalf("Err = %v, want the parent's context.Canceled", err)
	}
}

// TestOpContextPassThrough: under a parent whose deadline comes first, an
// opContext is the parent: the same Done, the same Err, and end cancels
// nothing.
func TestOpContextPassThrough(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newOp(parent, time.Now(), time.Hour)
	if c.Done() != parent.Done() {
		t.Fatal("Done is not the parent's")
	}
	pd, _ := parent.Deadline()
	if d, ok := c.Deadline(); !ok || !d.Equal(pd) {
		t.Fatalf("Deadline = %v, want the parent's %v", d, pd)
	}
	c.end()
	if err := c.Err(); err != nil {
		t.Fatalf("Err after end = %v, want the parent's nil", err)
	}
	ran := make(chan struct{})
	c.AfterFunc(func() { close(ran) })
	cancel()
	<-ran
	if err := c.Err(); err != context.Canceled {
		t.Fatalf("Err = %v, want the parent's context.Canceled", err)
	}

	// A parent whose deadline is later than the call's: not passed
	// through, the call's own deadline holds.
	later, cancelLater := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLater()
	c = newOp(later, time.Now(), time.Minute)
	if c.Done() == later.Done() {
		t.Fatal("Done is the parent's, whose deadline is later")
	}
	if d, _ := c.Deadline(); !d.Before(time.Now().Add(2 * time.Minute)) {
		t.Fatalf("Deadline = %v, want about a minute from now", d)
	}
	c.end()
	if err := c.Err(); err != context.Canceled {
		t.Fatalf("Err after end = %v, want context.Canceled", err)
	}
}

// The tests of beginShared hold a shared context to the same contract,
// and to its bound: it ends no earlier than the call's own deadline and
// at most sharedSlack later.

func TestOpContextSharedEndsAtItsDeadline(t *testing.T) {
	type key struct{}
	var s sharedDeadlines
	parent := context.WithValue(context.Background(), key{}, "v") // values, but it cannot end
	start := time.Now()
	var busy, c opContext
	busy.beginShared(&s, context.Background(), start, time.Hour) // in flight throughout
	defer busy.end()
	c.beginShared(&s, parent, start, 20*time.Millisecond)
	if c.shared == nil {
		t.Fatal("a call under a parent that cannot end, overlapping another call, got no shared context")
	}
	own := start.Add(20 * time.Millisecond)
	d, ok := c.Deadline()
	if !ok || d.Before(own) || d.Sub(own) > sharedSlack(20*time.Millisecond) {
		t.Fatalf("Deadline = %v, %v; want within %v after %v", d, ok, sharedSlack(20*time.Millisecond), own)
	}
	if c.Value(key{}) != "v" {
		t.Fatal("Value does not reach the parent's")
	}
	done := c.Done()
	fired := make(chan struct{})
	stop := context.AfterFunc(&c, func() { close(fired) })
	defer stop()
	c.end() // a shared context is not cancelled by one call's end
	if err := c.Err(); err != nil {
		t.Fatalf("Err after end, before the deadline = %v, want nil (Done is still open)", err)
	}
	select {
	case <-done:
		t.Fatal("Done closed by end")
	default:
	}
	<-done
	if now := time.Now(); now.Before(own) {
		t.Fatalf("Done closed %v before the call's deadline", own.Sub(now))
	}
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err = %v, want context.DeadlineExceeded", err)
	}
	if err := context.Cause(&c); err != context.DeadlineExceeded {
		t.Fatalf("Cause = %v, want context.DeadlineExceeded", err)
	}
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("an AfterFunc registered under the call did not run at its deadline")
	}
	if c.Done() != done {
		t.Fatal("Done returned another channel")
	}
}

func TestOpContextSharedIsShared(t *testing.T) {
	var s sharedDeadlines
	start := time.Now()
	// A call that no other overlaps takes a watch of its own.
	var lone opContext
	lone.beginShared(&s, context.Background(), start, time.Second)
	if lone.shared != nil {
		t.Fatal("a call that no other overlaps got a shared context")
	}
	lone.Done()
	lone.end()
	if err := lone.Err(); err != context.Canceled {
		t.Fatalf("Err of a lone call after end = %v, want context.Canceled", err)
	}
	if n := s.inFlight.Load(); n != 0 {
		t.Fatalf("%d calls in flight after the only one ended, want 0", n)
	}
	var busy, a, b, other opContext
	busy.beginShared(&s, context.Background(), start, time.Hour) // in flight throughout
	defer busy.end()
	if busy.shared != nil {
		t.Fatal("the first of overlapping calls got a shared context")
	}
	a.beginShared(&s, context.Background(), start, time.Second)
	b.beginShared(&s, context.Background(), start.Add(sharedSlack(time.Second)/2), time.Second)
	if a.shared == nil || a.shared != b.shared {
		t.Fatal("two calls half the slack apart got different contexts")
	}
	if a.Done() != b.Done() {
		t.Fatal("two calls sharing a context have different Done channels")
	}
	other.beginShared(&s, context.Background(), start.Add(2*sharedSlack(time.Second)), time.Second)
	if other.shared == a.shared {
		t.Fatal("a call two slacks later shares the earlier calls' context: it would end before its deadline")
	}
	// The replaced context lives while a call uses it, and is cancelled,
	// its timer stopped, once the last has ended.
	a.end()
	if err := b.Err(); err != nil {
		t.Fatalf("Err of a call still in flight = %v after another call sharing its context ended", err)
	}
	b.end()
	b.end() // twice is harmless: it lets go once
	if err := a.shared.ctx.Err(); err != context.Canceled {
		t.Fatalf("a replaced shared context's Err after its last call ended = %v, want context.Canceled", err)
	}
	if n := a.shared.refs.Load(); n != 0 {
		t.Fatalf("a replaced shared context has %d holders after its last call ended, want 0", n)
	}
	// The slot's current context outlives its calls, for the next ones.
	other.end()
	if err := other.shared.ctx.Err(); err != nil {
		t.Fatalf("the slot's current context's Err after its only call ended = %v, want nil", err)
	}
	var next opContext
	next.beginShared(&s, context.Background(), start.Add(2*sharedSlack(time.Second)), time.Second)
	if next.shared != other.shared {
		t.Fatal("a call did not join the slot's current context")
	}
	next.end()
	// A parent that can end gets a watch of its own, as begin gives it.
	ctx, cancel := context.WithCancel(context.Background())
	var own opContext
	own.beginShared(&s, ctx, start, time.Second)
	if own.shared != nil {
		t.Fatal("a parent that can end got a shared context")
	}
	done := own.Done()
	cancel()
	<-done
	if err := own.Err(); err != context.Canceled {
		t.Fatalf("Err after the parent's cancel = %v, want context.Canceled", err)
	}
	// So does one whose own deadline comes first: it is the parent.
	soon, cancelSoon := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancelSoon()
	var pass opContext
	pass.beginShared(&s, soon, time.Now(), time.Hour)
	if pass.shared != nil || !pass.passThrough {
		t.Fatal("a parent with an earlier deadline was not passed through")
	}
}

// TestSharedDeadlineBound checks, for calls with random timeouts starting
// at random offsets on one sharedDeadlines, that every call's context
// ends no earlier than its own deadline and at most sharedSlack later.
func TestSharedDeadlineBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s sharedDeadlines
		base := time.Now()
		timeouts := []time.Duration{time.Millisecond, 50 * time.Millisecond, time.Second, 5 * time.Second}
		offset := time.Duration(0)
		for range rapid.IntRange(1, 50).Draw(t, "calls") {
			offset += time.Duration(rapid.Int64Range(0, int64(2*time.Millisecond)).Draw(t, "gap"))
			timeout := rapid.SampledFrom(timeouts).Draw(t, "timeout")
			own := base.Add(offset).Add(timeout)
			sd := s.get(own, timeout)
			d, _ := sd.ctx.Deadline()
			if d.Before(own) || d.Sub(own) > sharedSlack(timeout) {
				t.Fatalf("a call with deadline %v and timeout %v got a context ending at %v", own.Sub(base), timeout, d.Sub(base))
			}
		}
	})
}

// TestSharedDeadlinesConcurrent has goroutines take and leave shared
// contexts at once, with deadlines that move on so that contexts are
// replaced all the time: no call may find its context ended while it
// holds it, and every context but the slots' current ones must end up
// cancelled, with no holder left.
func TestSharedDeadlinesConcurrent(t *testing.T) {
	var s sharedDeadlines
	var seen sync.Map
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			timeout := []time.Duration{time.Second, 2 * time.Second}[g%2]
			for range 2000 {
				d := s.get(time.Now().Add(timeout), timeout)
				seen.Store(d, true)
				if err := d.ctx.Err(); err != nil {
					t.Errorf("a call's shared context ended while the call held it: %v", err)
					return
				}
				d.leave()
			}
		}()
	}
	wg.Wait()
	current := map[*sharedDeadline]bool{}
	for i := range s.slots {
		current[s.slots[i].Load()] = true
	}
	n := 0
	seen.Range(func(k, _ any) bool {
		d := k.(*sharedDeadline)
		n++
		if current[d] {
			if r := d.refs.Load(); r != 1 {
				t.Errorf("a slot's current context has %d holders, want 1 (the slot)", r)
			}
			return true
		}
		if r := d.refs.Load(); r != 0 || d.ctx.Err() != context.Canceled {
			t.Errorf("a replaced context has %d holders and Err %v, want 0 and context.Canceled", r, d.ctx.Err())
		}
		return true
	})
	t.Logf("%d shared contexts for 16000 calls", n)
}
