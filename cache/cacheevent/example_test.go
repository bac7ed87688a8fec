package cacheevent_test

import (
	"fmt"

	"github.com/golib/lease/cache"
	"github.com/golib/lease/cache/cacheevent"
)

// An observer written against cacheevent alone, such as a metrics
// adapter's, is a cache.Observer: the types are the same.
func Example() {
	served := map[string]int{}
	var obs cache.Observer = cacheevent.ObserverFunc(func(e cacheevent.Event) {
		if s, ok := e.(*cacheevent.Served); ok {
			served[s.Outcome.String()]++
		}
	})
	// A Cache emits these; cache.Served is cacheevent.Served.
	obs.Observe(&cache.Served{EventInfo: cache.EventInfo{Key: "page:/home"}, Outcome: cache.Loaded})
	obs.Observe(&cacheevent.Served{EventInfo: cacheevent.EventInfo{Key: "page:/home"}, Outcome: cacheevent.Hit})
	obs.Observe(&cache.Invalidated{EventInfo: cache.EventInfo{Key: "page:/home"}})
	fmt.Println(served)
	// Output: map[hit:1 loaded:1]
}
