package leasequeue_test

import (
	"sync"
	"time"

	"github.com/golib/lease/lease"
)

// pauseClock is the system clock whose timers do not fire while it is
// paused: a worker on it stops renewing, polling and rebalancing, as a
// process stopped by SIGSTOP or a long GC pause does, and catches up when
// it resumes. Its time never stops.
type pauseClock struct {
	mu      sync.Mutex
	resumed chan struct{} // closed while running
}

func newPauseClock() *pauseClock {
	c := &pauseClock{resumed: make(chan struct{})}
	close(c.resumed)
	return c
}

var _ lease.Clock = (*pauseClock)(nil)

func (c *pauseClock) Now() time.Time { return time.Now() }

// pause stops the clock's timers until resume.
func (c *pauseClock) pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.resumed:
		c.resumed = make(chan struct{})
	default:
	}
}

func (c *pauseClock) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.resumed:
	default:
		close(c.resumed)
	}
}

// running returns a channel that is closed while the clock is not paused.
func (c *pauseClock) running() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resumed
}

func (c *pauseClock) NewTimer(d time.Duration) lease.Timer {
	t := &pauseTimer{ch: make(chan time.Time, 1), stop: make(chan struct{})}
	go func() {
		rt := time.NewTimer(d)
		defer rt.Stop()
		select {
		case <-rt.C:
		case <-t.stop:
			return
		}
		select {
		case <-c.running():
			t.ch <- time.Now()
		case <-t.stop:
		}
	}()
	return t
}

type pauseTimer struct {
	ch   chan time.Time
	stop chan struct{}
	once sync.Once
}

func (t *pauseTimer) C() <-chan time.Time { return t.ch }

func (t *pauseTimer) Stop() bool {
	t.once.Do(func() { close(t.stop) })
	return true
}
