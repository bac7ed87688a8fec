package leasetest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/golib/lease/lease"
)

// FakeClock is a lease.Clock whose time moves only when told to. Timers
// fire, in deadline order, during the Advance or Set call that reaches
// their deadline. It is safe for concurrent use.
type FakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced when the timer set changes
}

// NewFakeClock returns a FakeClock set to start.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start, changed: make(chan struct{})}
}

var _ lease.Clock = (*FakeClock)(nil)

// Now returns the clock's current time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the clock reaches Now()+d. A
// timer with d ≤ 0 fires at once.
func (c *FakeClock) NewTimer(d time.Duration) lease.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	c.notify()
	return t
}

// Advance moves the clock forward by d, firing every timer whose deadline
// it reaches, in deadline order.
func (c *FakeClock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the clock to t, firing every timer whose deadline is not after
// t. Setting an earlier time steps the clock back, as a wall clock can;
// pending timers then fire later.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	slices.SortStableFunc(c.timers, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at.After(t) {
			kept = append(kept, tm)
			continue
		}
		tm.ch <- tm.at // buffered 1; a timer fires at most once
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	c.notify()
}

// Timers returns the number of timers waiting to fire.
func (c *FakeClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitForTimers blocks until at least n timers are waiting to fire, or ctx
// ends, whose error it returns. Use it to let a goroutine reach its next
// sleep before advancing the clock.
func (c *FakeClock) WaitForTimers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		have, ch := len(c.timers), c.changed
		c.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *FakeClock) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

type fakeTimer struct {
	c  *FakeClock
	at time.Time
	ch chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, tm := range c.timers {
		if tm == t {
			c.timers = slices.Delete(c.timers, i, i+1)
			c.notify()
			return true
		}
	}
	return false
}
