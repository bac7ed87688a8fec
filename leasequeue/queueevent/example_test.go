package queueevent_test

import (
	"fmt"

	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasequeue/queueevent"
)

// An observer written against queueevent alone, such as a metrics
// adapter's, is a leasequeue.Observer: the types are the same.
func Example() {
	removed := 0
	var obs leasequeue.Observer = queueevent.ObserverFunc(func(e queueevent.Event) {
		if p, ok := e.(*queueevent.Pruned); ok && p.Err == nil {
			removed += p.Removed
		}
	})
	// A Queue emits these; leasequeue.Pruned is queueevent.Pruned.
	obs.Observe(&leasequeue.Pruned{EventInfo: leasequeue.EventInfo{Name: "jobs", Key: "jobs/prune/"}, Removed: 3})
	obs.Observe(&queueevent.Completed{EventInfo: queueevent.EventInfo{Name: "jobs", ID: "item-1"}, Attempt: 1})
	fmt.Println("removed", removed)
	// Output: removed 3
}
