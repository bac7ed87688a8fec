package jobevent_test

import (
	"context"
	"fmt"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler"
	"github.com/golib/lease/leasescheduler/jobevent"
)

// An observer written against jobevent alone, such as a metrics
// adapter's, given to a Locker: it sees the job added, then each run's
// result.
func Example() {
	obs := jobevent.ObserverFunc(func(e jobevent.Event) {
		switch e := e.(type) {
		case *jobevent.Added:
			fmt.Println("added", e.Job)
		case *jobevent.Ran:
			fmt.Println(e.Job, e.Result, e.Err)
		case *jobevent.NotRun:
			fmt.Println(e.Job, e.Result)
		}
	})
	client, _ := lease.NewClient(leasememory.New(leasememory.Options{}), lease.ClientOptions{Owner: "replica-a"})
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	locker, _ := leasescheduler.NewLocker(client, leasescheduler.Options{Policy: policy, Observer: obs})
	job := locker.CronJob("report", func(context.Context, leasescheduler.Run) error {
		return fmt.Errorf("disk full")
	}, nil)
	job.Run()
	// Output:
	// added report
	// report failed disk full
}
