// Package queueevent holds the events of package leasequeue: the Observer
// interface and the event types of queues and partition groups. It imports
// neither package leasequeue nor any store's client, so code that only
// observes queues, such as the metrics adapters leaseprom and leaseotel,
// links no pgx, squirrel or valkey-go. Package leasequeue names every type
// here under the same name (leasequeue.Claimed is queueevent.Claimed), as
// package os names the file types of io/fs.
//
// Most programs never import it: they pass leasequeue.NewSlogObserver, an
// adapter's observer or their own leasequeue.ObserverFunc as the Observer
// of leasequeue.Options or partition.Options.
package queueevent

import (
	"time"

	"github.com/golib/lease/lease"
)

// An Observer receives an Event for every step of the claims and partitions
// of a leasequeue.Queue or a partition.Group. Observe is called synchronously from the goroutine
// that took the step, so it must be fast and must not call back into the
// Queue or Group. It must be safe for concurrent use.
//
// The lease events of the same leases (acquired, renewed, released) go to
// the lease.Client's own observer.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to the Observer interface.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Event is one of *Claimed, *Heartbeat, *Completed, *Failed, *Lost (items
// and partitions), *Pruned (finished items), *Assigned, *Revoked and
// *Rebalanced (partitions). The set is closed to other packages so that new
// kinds can be added; switch on the type and ignore the rest.
type Event interface {
	// Info returns the fields every event has.
	Info() EventInfo
	event()
}

// EventInfo holds the fields every event carries.
type EventInfo struct {
	// Name is the queue's or the group's name.
	Name string
	// Worker is the worker's name: the lease client's owner for a Queue,
	// partition.Options.Worker for a partition.Group.
	Worker string
	// ID is the item's ID or the partition's name; empty for events of a
	// whole group or of its membership lease, and for a failed poll of the
	// source.
	ID string
	// Key is the lease key, and Token the acquisition's token (0 when
	// none was granted).
	Key   string
	Token lease.Token
	// Latency is how long the step took: for Completed and Failed, the
	// time since the item was claimed.
	Latency time.Duration
	// Err is the step's error; nil for successes.
	Err error
}

// Info returns e.
func (e EventInfo) Info() EventInfo { return e }

type (
	// Claimed is emitted when a claim on an item was taken (its lease
	// acquired and its attempt recorded), and by Queue.Run when a claim
	// failed for a reason other than the item being held by another
	// worker or finished (Err then says why).
	Claimed struct {
		EventInfo
		// Attempt counts the attempts at the item, this one included.
		Attempt int
		// Age is how long the item had been ready (enqueued, or its retry
		// delay over) when the claim began its attempt, measured on the
		// source's clock within the claim's request; for an item taken
		// over, the time its earlier worker held it counts in. Zero when
		// the source cannot tell (an item a producer added without its
		// ready time, or a clock that stepped back), and when Err is set.
		Age time.Duration
	}

	// Heartbeat is emitted by a running Queue or Group for each lease it
	// holds (items, partitions and the group membership) whose local
	// deadline moved forward since the last check, that is, after each
	// successful renewal; and with Err matching leasequeue.ErrUnhealthy
	// when a renewal is overdue, while the worker takes no new work.
	Heartbeat struct {
		EventInfo
		// Deadline is the lease's local deadline.
		Deadline time.Time
	}

	// Completed is emitted after a claim's fenced completion; Err is set
	// when it was refused (lease.ErrLost, fence.ErrStale) or failed.
	Completed struct {
		EventInfo
		Attempt int
	}

	// Failed is emitted after a claim's fenced failure; Err is set when
	// recording it was refused or failed.
	Failed struct {
		EventInfo
		Attempt int
		// Cause is the attempt's failure.
		Cause error
		// Dead reports that the item went to the dead-letter state.
		Dead bool
		// RetryAfter is when the item may be claimed again, if not Dead.
		RetryAfter time.Duration
	}

	// Lost is emitted when the lease of a claimed item or an owned
	// partition was lost (it expired, or another worker took it); Err is
	// the *lease.LostError. The item's or partition's context is cancelled
	// with that cause.
	Lost struct{ EventInfo }

	// Pruned is emitted by Queue.Run after it pruned the source's finished
	// items in the background (see leasequeue.Options.PruneEvery): Key and
	// Token are those of the prune lease (Queue.PruneKey), Latency is how
	// long the walk took, and Err why it stopped early, if it did. It is
	// not emitted when another worker was pruning.
	Pruned struct {
		EventInfo
		// Removed counts the items removed, also before an error.
		Removed int
	}

	// Assigned is emitted when the worker took a partition, before its
	// handler starts.
	Assigned struct{ EventInfo }

	// Revoked is emitted when the worker gave a partition up gracefully:
	// its handler has returned and its lease was released (Err is the
	// release's error). Reason says why.
	Revoked struct {
		EventInfo
		// Reason is partition.ErrRevoked (rebalancing), the cause of Run's
		// context (shutdown), or the handler's own error or nil when it
		// returned by itself.
		Reason error
	}

	// Rebalanced is emitted by a Group when the live members or the
	// worker's target share changed.
	Rebalanced struct {
		EventInfo
		// Members are the live members, sorted.
		Members []string
		// Target is the number of partitions this worker aims to own.
		Target int
		// Owned are the partitions it owns now, sorted.
		Owned []string
	}
)

func (*Claimed) event()    {}
func (*Heartbeat) event()  {}
func (*Completed) event()  {}
func (*Failed) event()     {}
func (*Lost) event()       {}
func (*Pruned) event()     {}
func (*Assigned) event()   {}
func (*Revoked) event()    {}
func (*Rebalanced) event() {}
