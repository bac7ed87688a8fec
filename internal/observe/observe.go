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

// A Line is how one event is logged: at Level, with Msg, the attributes
// Attrs returns, and Err as "error" if it is not nil.
type Line struct {
	Level slog.Level
	Msg   string
	Err   error
	// Attrs is called only if the logger writes at Level, so a filtered
	// event costs no attributes.
	Attrs func() []slog.Attr
}

// NewSlogObserver returns an observer that writes each event to logger as
// the one line line(e) says. A nil logger discards everything, as a nil
// Observer means the Nop one.
func NewSlogObserver[E any](logger *slog.Logger, line func(E) Line) Observer[E] {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return slogObserver[E]{logger, line}
}

type slogObserver[E any] struct {
	l    *slog.Logger
	line func(E) Line
}

func (o slogObserver[E]) Observe(e E) {
	ln := o.line(e)
	ctx := context.Background()
	if !o.l.Enabled(ctx, ln.Level) {
		return
	}
	var attrs []slog.Attr
	if ln.Attrs != nil {
		attrs = ln.Attrs()
	}
	if ln.Err != nil {
		attrs = append(attrs, slog.Any("error", ln.Err))
	}
	o.l.LogAttrs(ctx, ln.Level, ln.Msg, attrs...)
}
