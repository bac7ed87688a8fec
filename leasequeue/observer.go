package leasequeue

import (
	"errors"
	"log/slog"

	"github.com/golib/lease/internal/observe"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue/queueevent"
)

// The observer vocabulary of queues and of partition groups (package
// partition) lives in package queueevent, which links no store's client,
// so that code that only observes queues (the metrics adapters) does not
// link one either. These are the queue's names here; the partition events
// are queueevent.Assigned, Revoked and Rebalanced.
type (
	// An Observer receives an Event for every step of the claims of a
	// Queue, or of the partitions of a partition.Group: see
	// queueevent.Observer.
	Observer = queueevent.Observer
	// ObserverFunc adapts a function to the Observer interface.
	ObserverFunc = queueevent.ObserverFunc
	// Event is one of *Claimed, *Heartbeat, *Completed, *Failed, *Lost,
	// *Pruned, and the partition events: see queueevent.Event.
	Event = queueevent.Event
	// EventInfo holds the fields every event carries.
	EventInfo = queueevent.EventInfo

	// Claimed is emitted when a claim on an item was taken, or failed.
	Claimed = queueevent.Claimed
	// Heartbeat is emitted after each renewal of a lease of a running
	// Queue or partition.Group, and when a renewal is overdue.
	Heartbeat = queueevent.Heartbeat
	// Completed is emitted after a claim's fenced completion.
	Completed = queueevent.Completed
	// Failed is emitted after a claim's fenced failure.
	Failed = queueevent.Failed
	// Lost is emitted when the lease of a claimed item or an owned
	// partition was lost.
	Lost = queueevent.Lost
	// Pruned is emitted by Queue.Run after it pruned the source's finished
	// items in the background.
	Pruned = queueevent.Pruned
)

// NopObserver is the Observer that ignores every event; a nil Observer in
// Options means NopObserver.
var NopObserver Observer = observe.Nop[Event]{}

// MultiObserver returns an Observer that passes each event to every
// non-nil observer in order.
func MultiObserver(observers ...Observer) Observer {
	return observe.NewMulti[Event](observers...)
}

// NewSlogObserver returns an Observer that writes each event to logger:
// heartbeats at Debug, claims, completions, prunes and partition changes
// at Info, failures at Warn and losses and refused completions at Error. A
// nil logger discards everything.
func NewSlogObserver(logger *slog.Logger) Observer {
	return observe.NewSlogObserver(logger, slogLine)
}

// slogLine says how NewSlogObserver logs e.
func slogLine(e Event) observe.Line {
	level, msg := slog.LevelInfo, "leasequeue event"
	var attrs []slog.Attr
	i := e.Info()
	switch e := e.(type) {
	case *Claimed:
		msg = "item claimed"
		attrs = append(attrs, slog.Int("attempt", e.Attempt), slog.Duration("age", e.Age))
	case *Heartbeat:
		level, msg = slog.LevelDebug, "lease renewed"
		if i.Err != nil {
			level, msg = slog.LevelWarn, "lease renewal overdue"
		}
	case *Completed:
		msg = "item completed"
		attrs = append(attrs, slog.Int("attempt", e.Attempt))
	case *Failed:
		level, msg = slog.LevelWarn, "item failed"
		if e.Dead {
			msg = "item dead"
		}
		attrs = append(attrs, slog.Int("attempt", e.Attempt), slog.Any("cause", e.Cause))
	case *Lost:
		level, msg = slog.LevelError, "lease lost"
	case *Pruned:
		msg = "finished items pruned"
		attrs = append(attrs, slog.Int("removed", e.Removed))
	case *queueevent.Assigned:
		msg = "partition assigned"
	case *queueevent.Revoked:
		msg = "partition revoked"
		if e.Reason != nil {
			attrs = append(attrs, slog.Any("reason", e.Reason))
		}
	case *queueevent.Rebalanced:
		msg = "group rebalanced"
		attrs = append(attrs, slog.Any("members", e.Members), slog.Int("target", e.Target), slog.Any("owned", e.Owned))
	}
	if i.Err != nil && level < slog.LevelWarn {
		level = slog.LevelWarn
		if errors.Is(i.Err, lease.ErrLost) {
			level = slog.LevelError
		}
	}
	return observe.Line{Level: level, Msg: msg, Err: i.Err, Attrs: func() []slog.Attr {
		return append(attrs,
			slog.String("name", i.Name),
			slog.String("worker", i.Worker),
			slog.String("id", i.ID),
			slog.String("key", i.Key),
			slog.Uint64("token", uint64(i.Token)),
			slog.Duration("latency", i.Latency))
	}}
}
