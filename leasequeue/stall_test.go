package leasequeue_test

import (
	"context"
	"sync"
	"time"
)

// stallMeter records the periods in which this process did not get to run
// (a loaded machine, a long GC), so that a test can tell time spent
// waiting by design from time the machine took away.
type stallMeter struct {
	mu   sync.Mutex
	gaps [][2]time.Time
}

const stallTick = 5 * time.Millisecond

// run samples until ctx ends: a sleep of stallTick that takes 20ms longer
// is a stall.
func (m *stallMeter) run(ctx context.Context) {
	for ctx.Err() == nil {
		start := time.Now()
		time.Sleep(stallTick)
		if end := time.Now(); end.Sub(start) > stallTick+20*time.Millisecond {
			m.mu.Lock()
			m.gaps = append(m.gaps, [2]time.Time{start.Add(stallTick), end})
			m.mu.Unlock()
		}
	}
}

// within returns how much of [from, to] the process was stalled.
func (m *stallMeter) within(from, to time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum time.Duration
	for _, g := range m.gaps {
		if a, b := max(g[0].UnixNano(), from.UnixNano()), min(g[1].UnixNano(), to.UnixNano()); b > a {
			sum += time.Duration(b - a)
		}
	}
	return sum
}
