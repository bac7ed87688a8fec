// Package jobevent holds the events of package leasescheduler: the
// Observer interface and what each scheduled run of a job came to. It
// imports neither package leasescheduler nor a scheduler (gocron,
// robfig/cron), so code that only observes jobs, such as the metrics
// adapters leaseprom and leaseotel, links neither.
//
// Most programs never import it: they pass an adapter's observer
// (leaseprom.Metrics.Jobs, leaseotel.Telemetry.Jobs) as the Observer of
// leasescheduler.Options or leasescheduler.ElectorOptions.
package jobevent

import (
	"time"

	"github.com/golib/lease/internal/observe"
	"github.com/golib/lease/lease"
)

// An Observer receives an Event for every scheduled run of a job that a
// leasescheduler.Locker or Elector took part in. Observe is called
// synchronously from the goroutine of the run, so it must be fast and must
// not call back into the Locker or Elector. It must be safe for concurrent
// use.
//
// The events of the leases themselves (acquired, renewed, released, lost)
// go to the lease.Client's own observer.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to the Observer interface.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// NopObserver is the Observer that ignores every event; a nil Observer in
// the options of package leasescheduler means NopObserver.
var NopObserver Observer = observe.Nop[Event]{}

// MultiObserver returns an Observer that passes each event to every
// non-nil observer in order.
func MultiObserver(observers ...Observer) Observer {
	return observe.NewMulti[Event](observers...)
}

// Event is one of *Added, *Ran and *NotRun. The set is closed to other
// packages so that new kinds can be added; switch on the type and ignore
// the rest.
type Event interface {
	// Info returns the fields every event has.
	Info() EventInfo
	event()
}

// EventInfo holds the fields every event carries.
type EventInfo struct {
	// Job is the job's name, which names its lease: the name given to
	// Locker.Job, Locker.CronJob or Elector.Job, or the name gocron passed
	// to Locker.Lock. Empty for a run of Elector.Task, since gocron does
	// not tell an Elector which job it runs. The names are the program's
	// own jobs, a set it bounds, so the metrics adapters use Job as a
	// label.
	Job string
	// Token is the fencing token of the run's lease (a Locker's) or of the
	// leader's lease (an Elector's); 0 when the run took no lease.
	Token lease.Token
	// Err is the job's error (Failed), the loss (Lost, a *lease.LostError),
	// or why the run did not start (Skipped, Error); nil for OK, Unchecked
	// and Added.
	Err error
}

// Info returns e.
func (e EventInfo) Info() EventInfo { return e }

// Result says what a scheduled run came to. Its String is the value of
// the metrics adapters' result label.
type Result int

const (
	// OK: the job ran and returned nil, and its lease held throughout.
	OK Result = iota + 1
	// Failed: the job ran and returned an error; the lease held.
	Failed
	// Lost: the job ran, and its lease (or the leadership) was lost while
	// it ran: its context was cancelled, whatever it returned.
	Lost
	// Unchecked: a plain gocron task ran under Locker.Lock and its lease
	// held throughout. A Locker does not see a plain task's error; to have
	// it counted, build the job with Locker.Job.
	Unchecked
	// Skipped: the run did not start here because another replica has it:
	// another replica holds the run's lease or has taken its slot, or this
	// replica does not lead.
	Skipped
	// Error: the run did not start because its lease could not be taken
	// for another reason: the backend failed or did not answer, or a task
	// of Locker.Job ran without its lease (leasescheduler.ErrNoLock).
	Error
)

// String returns the result's label: ok, failed, lost, unchecked, skipped
// or error.
func (r Result) String() string {
	switch r {
	case OK:
		return "ok"
	case Failed:
		return "failed"
	case Lost:
		return "lost"
	case Unchecked:
		return "unchecked"
	case Skipped:
		return "skipped"
	case Error:
		return "error"
	}
	return "unknown"
}

// Results lists every Result, in order.
var Results = []Result{OK, Failed, Lost, Unchecked, Skipped, Error}

type (
	// Added is emitted when a job is given its leases, before its first
	// run: by Locker.Job, Locker.CronJob, Locker.CronWrapper and
	// Elector.Job (a job that gocron names to Locker.Lock is first seen at
	// its first run). It lets the metrics adapters create the job's series
	// at 0, so that a first run that fails is seen as an increase.
	Added struct{ EventInfo }
	// Ran is emitted when a run of a job ended.
	Ran struct {
		EventInfo
		// Result is OK, Failed, Lost or Unchecked.
		Result Result
		// Start is when the run's lease was taken (a Locker's run) or the
		// run started (an Elector's), and End when the run ended, both on
		// the clock of the Locker (leasescheduler.Options.Clock) or of the
		// Elector's client.
		Start, End time.Time
	}
	// NotRun is emitted when a scheduled run did not start.
	NotRun struct {
		EventInfo
		// Result is Skipped or Error.
		Result Result
		// At is when the run was refused, on the same clock as Ran's.
		At time.Time
	}
)

func (*Added) event()  {}
func (*Ran) event()    {}
func (*NotRun) event() {}
