// Package stall measures the periods in which the test process did not get
// to run: a loaded machine, a throttled CPU quota, a long GC pause.
//
// Tests of timing promises ("the loss is reported before the server frees
// the lease") hold only while the process runs: no library can notice its
// own deadline while the machine does not schedule it, which is why every
// protected write carries a fencing token. A test that checks such a
// promise subtracts the stalls it measured, so that it fails when the code
// is late and not when the machine was.
package stall

import (
	"sync"
	"testing"
	"time"
)

// Tick is how often a Meter samples; a sample that arrives more than Slack
// late counts as a stall.
const (
	Tick  = 5 * time.Millisecond
	Slack = 20 * time.Millisecond
)

// A Meter records stalls of the process from Start until the test ends.
type Meter struct {
	mu   sync.Mutex
	gaps [][2]time.Time
}

// Start starts measuring; the meter stops, and its goroutine exits, when
// the test and its cleanups end.
func Start(t testing.TB) *Meter {
	m := &Meter{}
	stop, done := make(chan struct{}), make(chan struct{})
	// From now, not from when the goroutine first runs: on a busy machine
	// that may be after the first stall.
	last := time.Now()
	go func() {
		defer close(done)
		t := time.NewTicker(Tick)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			now := time.Now()
			if now.Sub(last) > Tick+Slack {
				m.mu.Lock()
				m.gaps = append(m.gaps, [2]time.Time{last.Add(Tick), now})
				m.mu.Unlock()
			}
			last = now
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return m
}

// Within returns how long the process was stalled between from and to.
func (m *Meter) Within(from, to time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum time.Duration
	for _, g := range m.gaps {
		if a, b := later(g[0], from), earlier(g[1], to); b.After(a) {
			sum += b.Sub(a)
		}
	}
	return sum
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
