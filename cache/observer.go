package cache

import (
	"context"
	"errors"
	"log/slog"

	"github.com/golib/lease/cache/cacheevent"
	"github.com/golib/lease/guard"
	"github.com/golib/lease/internal/observe"
	"github.com/golib/lease/lease"
)

// The observer vocabulary of a Cache lives in package cacheevent, which
// links no Valkey client, so that code that only observes caches (the
// metrics adapters) does not link one either. These are its names here.
type (
	// An Observer receives an Event for every Get, load, publication and
	// invalidation of a Cache: see cacheevent.Observer.
	Observer = cacheevent.Observer
	// ObserverFunc adapts a function to the Observer interface.
	ObserverFunc = cacheevent.ObserverFunc
	// Event is one of *Served, *GetFailed, *Refreshed, *RefreshFailed,
	// *Published, *PublishRefused and *Invalidated: see cacheevent.Event.
	Event = cacheevent.Event
	// EventInfo holds the fields every event carries.
	EventInfo = cacheevent.EventInfo

	// Served is emitted when Get returns a value.
	Served = cacheevent.Served
	// GetFailed is emitted when Get returns an error.
	GetFailed = cacheevent.GetFailed
	// Refreshed is emitted when this process ran a load function and
	// published its value.
	Refreshed = cacheevent.Refreshed
	// RefreshFailed is emitted when this process held the refresh lease and
	// published nothing.
	RefreshFailed = cacheevent.RefreshFailed
	// Published is emitted after a successful publication.
	Published = cacheevent.Published
	// PublishRefused is emitted when a publication was refused or failed.
	PublishRefused = cacheevent.PublishRefused
	// Invalidated is emitted after Invalidate, successful or not.
	Invalidated = cacheevent.Invalidated
)

// NopObserver is the Observer that ignores every event; a nil
// Options.Observer means NopObserver. A Cache with NopObserver builds no
// events at all.
var NopObserver Observer = observe.Nop[Event]{}

// MultiObserver returns an Observer that passes each event to every
// non-nil observer in order.
func MultiObserver(observers ...Observer) Observer {
	return observe.NewMulti[Event](observers...)
}

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
