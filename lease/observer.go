package lease

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/golib/lease/internal/observe"
)

// An Observer receives an Event for every state change of every lease of a
// Client. Observe is called synchronously from the goroutine that made the
// change, so it must be fast and must not call back into the Client. It
// must be safe for concurrent use.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to the Observer interface.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// NopObserver is the Observer that ignores every event; a nil
// ClientOptions.Observer means NopObserver. A client with NopObserver does
// not build events at all.
var NopObserver Observer = observe.Nop[Event]{}

// MultiObserver returns an Observer that passes each event to every
// non-nil observer in order.
func MultiObserver(observers ...Observer) Observer {
	return observe.NewMulti[Event](observers...)
}

// Event is one of *Acquired, *AcquireFailed, *Renewed, *RenewFailed, *Lost,
// *Released and *ReleaseFailed. The set is closed to other packages so that
// new kinds can be added; switch on the type and ignore the rest.
type Event interface {
	// Info returns the fields every event has.
	Info() EventInfo
	event()
}

// EventInfo holds the fields every event carries.
type EventInfo struct {
	// Key is the handle's Key: for a permit its permit key, for a set its
	// keys joined by ","; for an AcquireFailed event of a semaphore, the
	// semaphore's key.
	Key string
	// Semaphore is the semaphore's key for a permit (Key is then
	// PermitKey(Semaphore, slot), or Semaphore itself in AcquireFailed),
	// and "" otherwise. Metrics label a permit by it, so that a
	// semaphore's slots share one label.
	Semaphore string
	// Keys are a set's keys, sorted and without duplicates, and nil
	// otherwise (then the event is about the one key Key). The slice is
	// shared with the handle and with the set's other events, so that no
	// event copies it: read it, never modify it.
	Keys  []string
	Owner string
	// Token is the acquisition's token; 0 when none was granted.
	Token Token
	// Latency is the duration of the one backend call the event reports:
	// the acquire attempt that got the lease (Acquired) or the last attempt
	// made (AcquireFailed), the renewal, or the release. It never includes
	// waiting between attempts, so it can feed a latency histogram of the
	// backend. Zero for Lost, which reports no call.
	Latency time.Duration
	// Err is the operation's error; nil for successes.
	Err error
}

// Info returns e.
func (e EventInfo) Info() EventInfo { return e }

type (
	// Acquired is emitted when Acquire or TryAcquire gets the lease, and
	// when AcquirePermit, AcquireSet or their Try variants get theirs.
	Acquired struct {
		EventInfo
		// Attempts is the number of backend attempts made, at least 1.
		Attempts int
		// Waited is the time from the Acquire call to the event, on the
		// client's clock: all attempts and the pauses between them.
		Waited time.Duration
		// Remaining is the time left, on the client's clock, until the
		// acquisition's local deadline (Handle.Deadline) when the event
		// was emitted: TTL − SafetyMargin less the time since the granting
		// request was sent. Unless a Renewed event moves it, the holder
		// must assume the lease is gone once it has passed, even if no
		// Released or Lost event follows (a handle dropped without
		// Release, a lease left to expire). A duration rather than an
		// instant, so that an observer can compare it with its own clock.
		Remaining time.Duration
	}
	// AcquireFailed is emitted when Acquire or TryAcquire (or
	// AcquirePermit, AcquireSet and their Try variants) gives up after at
	// least one backend attempt. A call refused before any I/O (an invalid
	// key or policy, a backend without the capability, a context already
	// done) emits nothing.
	AcquireFailed struct {
		EventInfo
		// Attempts is the number of backend attempts made, at least 1.
		Attempts int
		// Waited is the time from the Acquire call to the event, on the
		// client's clock, including the clean-up release, if any.
		Waited time.Duration
	}
	// Renewed is emitted after a successful renewal.
	Renewed struct {
		EventInfo
		// Remaining is the time left, on the client's clock, until the
		// acquisition's local deadline when the event was emitted: the
		// renewal moved it to TTL − SafetyMargin after the request was
		// sent. See Acquired.Remaining.
		Remaining time.Duration
	}
	// RenewFailed is emitted after a renewal attempt that failed; Managed
	// keeps retrying unless the failure is a loss.
	RenewFailed struct{ EventInfo }
	// Lost is emitted once when a Managed renewer concludes that the lease
	// is gone; Err is a *LostError.
	Lost struct{ EventInfo }
	// Released is emitted when Release ended the acquisition.
	Released struct{ EventInfo }
	// ReleaseFailed is emitted when Release failed; Err says whether the
	// lease was already gone (ErrLost) or the outcome is unknown
	// (ErrIndeterminate).
	ReleaseFailed struct{ EventInfo }
)

func (*Acquired) event()      {}
func (*AcquireFailed) event() {}
func (*Renewed) event()       {}
func (*RenewFailed) event()   {}
func (*Lost) event()          {}
func (*Released) event()      {}
func (*ReleaseFailed) event() {}

// NewSlogObserver returns an Observer that writes each event to logger as
// one structured line with key, owner, token, latency and error, and for
// acquisitions also attempts and waited. Levels: renewals, and
// acquisitions refused because the lease is held or the caller gave up
// (unless an attempt went unanswered), at Debug; acquisitions and releases
// at Info; other failures, and releases of leases already gone, at Warn;
// losses, and other failed releases (the lease may stay held until its TTL
// passes), at Error. A nil logger discards everything. The levels are those
// of the zap observer in package fxmodule.
func NewSlogObserver(logger *slog.Logger) Observer {
	return observe.NewSlogObserver(logger, slogLine)
}

// slogLine says how NewSlogObserver logs e.
func slogLine(e Event) observe.Line {
	level, msg := slog.LevelInfo, "lease event"
	var attrs []slog.Attr
	switch e := e.(type) {
	case *Acquired:
		msg = "lease acquired"
		attrs = append(attrs, slog.Int("attempts", e.Attempts), slog.Duration("waited", e.Waited))
	case *AcquireFailed:
		level, msg = slog.LevelDebug, "lease not acquired"
		attrs = append(attrs, slog.Int("attempts", e.Attempts), slog.Duration("waited", e.Waited))
		if errors.Is(e.Err, ErrIndeterminate) || !isNotAcquired(e.Err) && !errors.Is(e.Err, context.Canceled) {
			level = slog.LevelWarn // the key may be held, by nobody, for a TTL
		}
	case *Renewed:
		level, msg = slog.LevelDebug, "lease renewed"
	case *RenewFailed:
		level, msg = slog.LevelWarn, "lease renewal failed"
	case *Lost:
		level, msg = slog.LevelError, "lease lost"
	case *Released:
		msg = "lease released"
	case *ReleaseFailed:
		// The lease may stay held until its TTL passes, unless it was
		// already gone.
		level, msg = slog.LevelError, "lease release failed"
		if errors.Is(e.Err, ErrLost) {
			level = slog.LevelWarn
		}
	}
	i := e.Info()
	return observe.Line{Level: level, Msg: msg, Err: i.Err, Attrs: func() []slog.Attr {
		return append(attrs,
			slog.String("key", i.Key),
			slog.String("owner", i.Owner),
			slog.Uint64("token", uint64(i.Token)),
			slog.Duration("latency", i.Latency))
	}}
}
