package cache

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/golib/lease/guard"
	"github.com/golib/lease/internal/observe"
	"github.com/golib/lease/lease"
)

// An Observer receives an Event for every Get, load, publication and
// invalidation of a Cache. Observe is called synchronously from the
// goroutine doing the work, so it must be fast and must not call back into
// the Cache. It must be safe for concurrent use.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to the Observer interface.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// NopObserver is the Observer that ignores every event; a nil
// Options.Observer means NopObserver. A Cache with NopObserver builds no
// events at all.
var NopObserver Observer = observe.Nop[Event]{}

// MultiObserver returns an Observer that passes each event to every
// non-nil observer in order.
func MultiObserver(observers ...Observer) Observer {
	return observe.NewMulti[Event](observers...)
}

// Event is one of *Served, *GetFailed, *Refreshed, *RefreshFailed, *Published,
// *PublishRefused and *Invalidated. The set is closed to other packages so
// that new kinds can be added; switch on the type and ignore the rest.
type Event interface {
	// Info returns the fields every event has.
	Info() EventInfo
	event()
}

// EventInfo holds the fields every event carries.
type EventInfo struct {
	// Key is the cache key.
	Key string
	// Token is the token of the refresh lease's acquisition involved: the
	// one that published the value served, loaded it, or tried to publish
	// it. For Invalidated it is the entry's invalidation mark:
	// acquisitions up to it may no longer publish.
	Token lease.Token
	// Latency is how long the operation took.
	Latency time.Duration
	// Err is the operation's error; nil for successes.
	Err error
}

// Info returns e.
func (e EventInfo) Info() EventInfo { return e }

type (
	// Served is emitted when Get returns a value; Outcome says how it got
	// it.
	Served struct {
		EventInfo
		Outcome Outcome
	}
	// GetFailed is emitted when Get returns an error.
	GetFailed struct{ EventInfo }
	// Refreshed is emitted when this process ran a load function and
	// published its value. Latency covers the load and the publication.
	Refreshed struct{ EventInfo }
	// RefreshFailed is emitted when this process held the refresh lease and
	// published nothing: the load function failed or panicked, the lease
	// was lost, or the publication was refused. Err says which.
	RefreshFailed struct{ EventInfo }
	// Published is emitted after a successful publication.
	Published struct {
		EventInfo
		// Size is the value's length in bytes.
		Size int
	}
	// PublishRefused is emitted when a publication was refused or failed;
	// Err matches guard.ErrNotCurrent, ErrInvalidated or
	// lease.ErrIndeterminate, or is another error after which nothing was
	// written.
	PublishRefused struct{ EventInfo }
	// Invalidated is emitted after Invalidate, successful or not.
	Invalidated struct{ EventInfo }
)

func (*Served) event()         {}
func (*GetFailed) event()      {}
func (*Refreshed) event()      {}
func (*RefreshFailed) event()  {}
func (*Published) event()      {}
func (*PublishRefused) event() {}
func (*Invalidated) event()    {}

// NewSlogObserver returns an Observer that writes each event to logger:
// served values and publications at Debug, refreshes and invalidations at
// Info,
// refused publications, failed loads and failed Gets at Warn (at Info when
// the cause is a refusal the protocol expects: an invalidated entry, a
// superseded lease, the caller's cancelled context). A nil logger discards
// everything.
func NewSlogObserver(logger *slog.Logger) Observer {
	return observe.NewSlogObserver(logger, slogLine)
}

// slogLine says how NewSlogObserver logs e.
func slogLine(e Event) observe.Line {
	level, msg := slog.LevelInfo, "cache event"
	var attrs []slog.Attr
	switch e := e.(type) {
	case *Served:
		level, msg = slog.LevelDebug, "cache served"
		attrs = append(attrs, slog.String("outcome", e.Outcome.String()))
	case *GetFailed:
		level, msg = warnUnlessExpected(e.Err), "cache get failed"
	case *Refreshed:
		msg = "cache refreshed"
	case *RefreshFailed:
		level, msg = warnUnlessExpected(e.Err), "cache refresh published nothing"
	case *Published:
		level, msg = slog.LevelDebug, "cache published"
		attrs = append(attrs, slog.Int("size", e.Size))
	case *PublishRefused:
		level, msg = warnUnlessExpected(e.Err), "cache publication refused"
	case *Invalidated:
		msg = "cache invalidated"
		if e.Err != nil {
			level = slog.LevelWarn
		}
	}
	i := e.Info()
	return observe.Line{Level: level, Msg: msg, Err: i.Err, Attrs: func() []slog.Attr {
		return append(attrs,
			slog.String("key", i.Key),
			slog.Uint64("token", uint64(i.Token)),
			slog.Duration("latency", i.Latency))
	}}
}

// warnUnlessExpected returns Info for the refusals the protocol expects
// and Warn for everything else.
func warnUnlessExpected(err error) slog.Level {
	if errors.Is(err, ErrInvalidated) || errors.Is(err, lease.ErrLost) ||
		errors.Is(err, context.Canceled) || errors.Is(err, guard.ErrNotCurrent) {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}
