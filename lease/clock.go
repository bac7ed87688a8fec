package lease

import "time"

// A Clock tells the client the time and makes timers. The client uses it for
// local deadlines, retry pauses and renewal cadence; it never sends a
// timestamp to a backend. Times returned by the system clock carry a
// monotonic reading, so deadlines are immune to wall-clock steps.
// leasetest.FakeClock is a deterministic implementation for tests.
//
// Implementations must be safe for concurrent use.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// A Timer is the part of *time.Timer that the client uses.
type Timer interface {
	// C returns the channel on which the timer delivers the time when it
	// fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it stopped the
	// timer before it fired.
	Stop() bool
}

// SystemClock returns the Clock backed by package time; it is what a nil
// ClientOptions.Clock means.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time                 { return time.Now() }
func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }
