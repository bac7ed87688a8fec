// Package observe is the one home of the observer plumbing that lease,
// cache and leasequeue share: the do-nothing observer, the fan-out to
// several observers, and the writing of one event as one log/slog line.
// Each package keeps its own Observer interface and Event types and only
// chooses a level and a message per event.
//
// It imports only the standard library, like package lease.
package observe

import (
	"context"
	"log/slog"
)

// Observer is the shape of every package's Observer interface.
type Observer[E any] interface{ Observe(E) }

// Nop ignores every event. Its values compare equal, so a package can
// notice its NopObserver and build no events at all.
type Nop[E any] struct{}

// Observe does nothing.
func (Nop[E]) Observe(E) {}

// Multi passes each event to every observer, in order.
type Multi[E any, O Observer[E]] []O

// NewMulti returns the non-nil observers as a Multi.
func NewMulti[E any, O Observer[E]](observers ...O) Multi[E, O] {
	var m Multi[E, O]
	for _, o := range observers {
		if any(o) != nil {
			m = append(m, o)
		}
	}
	return m
}

// Observe passes e to every observer of m in order.
func (m Multi[E, O]) Observe(e E) {
	for _, o := range m {
		o.Observe(e)
	}
}

// Slog writes events to a *slog.Logger, one line each.
type Slog struct{ l *slog.Logger }

// NewSlog returns a Slog writing to logger; a nil logger discards
// everything, as a nil Observer means the Nop one.
func NewSlog(logger *slog.Logger) Slog {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return Slog{logger}
}

// Log writes one line at level with msg, the attributes attrs returns, and
// err as "error" if it is not nil. attrs is called only if the logger
// writes at level, so a filtered event costs no attributes.
func (s Slog) Log(level slog.Level, msg string, err error, attrs func() []slog.Attr) {
	ctx := context.Background()
	if !s.l.Enabled(ctx, level) {
		return
	}
	as := attrs()
	if err != nil {
		as = append(as, slog.Any("error", err))
	}
	s.l.LogAttrs(ctx, level, msg, as...)
}
