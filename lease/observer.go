package lease

import (
	"context"
	"errors"
	"log/slog"
	"time"
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
var NopObserver Observer = nopObserver{}

type nopObserver struct{}

func (nopObserver) Observe(Event) {}

// MultiObserver returns an Observer that passes each event to every
// non-nil observer in order.
func MultiObserver(observers ...Observer) Observer {
	var list []Observer
	for _, o := range observers {
		if o != nil {
			list = append(list, o)
		}
	}
	return multiObserver(list)
}

type multiObserver []Observer

func (m multiObserver) Observe(e Event) {
	for _, o := range m {
		o.Observe(e)
	}
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
	Key   string
	Owner string
	// Token is the acquisition's token; 0 when none was granted.
	Token Token
	// Latency is how long the operation took, including retries.
	Latency time.Duration
	// Err is the operation's error; nil for successes.
	Err error
}

// Info returns e.
func (e EventInfo) Info() EventInfo { return e }

type (
	// Acquired is emitted when Acquire or TryAcquire gets the lease.
	Acquired struct {
		EventInfo
		Attempts int
	}
	// AcquireFailed is emitted when Acquire or TryAcquire gives up.
	AcquireFailed struct {
		EventInfo
		Attempts int
	}
	// Renewed is emitted after a successful renewal.
	Renewed struct{ EventInfo }
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
// one structured line with key, owner, token, latency and error: renewals,
// and acquisitions refused because the lease is held or the caller gave
// up, at Debug; acquisitions and releases at Info; other failures, and
// releases of leases already gone, at Warn; losses, and other failed
// releases (the lease may stay held until its TTL passes), at Error. A nil
// logger discards everything. The levels are those of the zap observer in
// package fxmodule.
func NewSlogObserver(logger *slog.Logger) Observer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &slogObserver{logger}
}

type slogObserver struct{ l *slog.Logger }

func (o *slogObserver) Observe(e Event) {
	level, msg := slog.LevelInfo, "lease event"
	var attrs []slog.Attr
	switch e := e.(type) {
	case *Acquired:
		msg = "lease acquired"
		attrs = append(attrs, slog.Int("attempts", e.Attempts))
	case *AcquireFailed:
		level, msg = slog.LevelDebug, "lease not acquired"
		attrs = append(attrs, slog.Int("attempts", e.Attempts))
		if !isNotAcquired(e.Err) && !errors.Is(e.Err, context.Canceled) {
			level = slog.LevelWarn
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
	ctx := context.Background()
	if !o.l.Enabled(ctx, level) {
		return
	}
	i := e.Info()
	attrs = append(attrs,
		slog.String("key", i.Key),
		slog.String("owner", i.Owner),
		slog.Uint64("token", uint64(i.Token)),
		slog.Duration("latency", i.Latency))
	if i.Err != nil {
		attrs = append(attrs, slog.Any("error", i.Err))
	}
	o.l.LogAttrs(ctx, level, msg, attrs...)
}
