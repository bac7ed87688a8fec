// Package cacheevent holds the events of package cache: the Observer
// interface, the event types and the Outcome of a Get. It imports neither
// package cache nor valkey-go, so code that only observes caches, such as
// the metrics adapters leaseprom and leaseotel, links neither. Package cache
// names every type and constant here under the same name (cache.Served is
// cacheevent.Served, cache.Hit is cacheevent.Hit), as package os names the
// file types of io/fs.
//
// Most programs never import it: they pass cache.NewSlogObserver, an
// adapter's observer or their own cache.ObserverFunc as
// cache.Options.Observer.
package cacheevent

import (
	"strconv"
	"time"

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
	// Err matches guard.ErrNotCurrent, cache.ErrInvalidated or
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

// Outcome says how Get obtained the value it returned.
type Outcome int

const (
	// Hit means a fresh value was on the server. It takes one round trip,
	// or two when a Cache without StaleFor reads a value that a Cache with
	// StaleFor published.
	Hit Outcome = iota + 1
	// Loaded means this Get ran its load function and published the value.
	Loaded
	// Shared means another Get loaded the value, in this process or
	// another one, and this one waited for it.
	Shared
	// Stale means the value is past its TTL (but within StaleFor) and
	// another process is refreshing it.
	Stale
)

// String returns the outcome's lower-case name ("hit", "loaded", "shared",
// "stale"), as cache.NewSlogObserver logs it and the metrics adapters label
// it.
func (o Outcome) String() string {
	switch o {
	case Hit:
		return "hit"
	case Loaded:
		return "loaded"
	case Shared:
		return "shared"
	case Stale:
		return "stale"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}
