package handoff_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler"
	"github.com/golib/lease/leaseservice"
)

const (
	// tick is the interval of the Electors' task.
	tick = 100 * time.Millisecond
	// leadTicks is how many ticks a leader leads, once every other
	// replica campaigns, before it is stopped.
	leadTicks = 5
)

// An electorMethod is how a stopping Elector gives up the lease.
type electorMethod struct {
	name string
	// successors are the ElectorOptions.Successors of every replica.
	successors []string
}

var electorOwners = []string{"replica-0", "replica-1", "replica-2"}

var electorMethods = []electorMethod{
	{"handoff", electorOwners},
	{"release", nil},
}

// BenchmarkElectorRollingRestart counts the ticks of a scheduled task
// that no replica ran while 3 replicas of a service are restarted one
// after the other. Each replica is a gocron scheduler with a
// leasescheduler.Elector (TTL 10 s) as its distributed elector and a
// DurationJob every 100ms, started on the same grid on every replica, so
// that on each tick the leader runs the task and the others skip it. A
// restart stops the leader (its Elector's Run context ends, then its
// scheduler shuts down) and starts it again, with the same owner, as a
// follower; the leader is stopped 5 ticks after every other replica
// campaigns. With method=handoff every replica lists the 3 owners as
// ElectorOptions.Successors (its own is left out), so the stopping leader
// hands the lease off; with method=release the list is empty and it
// releases the lease. One op is a rolling restart (3 restarts);
// skipped-ticks is the number of ticks, from the first leader's election
// to 5 ticks after the last restart, on which no replica ran the task,
// per op, ticks the number of ticks counted per op, and
// stop-to-lead-max-ms the longest time per op from a leader's
// stop to its successor's election (the Elected transition).
func BenchmarkElectorRollingRestart(b *testing.B) {
	for _, be := range backends {
		b.Run("backend="+be.name, func(b *testing.B) {
			open := be.start(b)
			for _, m := range electorMethods {
				b.Run("method="+m.name, func(b *testing.B) {
					var skipped, all int
					var worst time.Duration
					b.ResetTimer()
					for range b.N {
						s, n, w := electorRollingRestart(b, open, m)
						skipped, all = skipped+s, all+n
						worst = max(worst, w)
					}
					b.StopTimer()
					b.ReportMetric(0, "ns/op")
					b.ReportMetric(float64(skipped)/float64(b.N), "skipped-ticks")
					b.ReportMetric(float64(all)/float64(b.N), "ticks")
					b.ReportMetric(float64(worst)/1e6, "stop-to-lead-max-ms")
				})
			}
		})
	}
}

// An electorReplica is one process of the service: a scheduler whose
// job runs on the replica that its Elector elects.
type electorReplica struct {
	owner string
	stop  func() // ends Run, then shuts the scheduler down and closes the store
}

// tickLog records the ticks of the grid on which some replica ran the
// task, by their index since the grid's origin.
type tickLog struct {
	origin time.Time
	mu     sync.Mutex
	ran    map[int64]bool
}

// record marks as run the tick that a run at now belongs to: the last
// one at or before now (a run starts after its tick, late by up to the
// machine's scheduling delay), with 5ms to spare for a wall clock that
// stepped back.
func (l *tickLog) record(now time.Time) {
	k := int64((now.Sub(l.origin) + 5*time.Millisecond) / tick)
	l.mu.Lock()
	l.ran[k] = true
	l.mu.Unlock()
}

// index returns the index of the first tick at or after t.
func (l *tickLog) index(t time.Time) int64 {
	return int64((t.Sub(l.origin) + tick - 1) / tick)
}

// skipped returns the ticks of [from, to) that no replica ran.
func (l *tickLog) skipped(from, to int64) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ks []int64
	for k := from; k < to; k++ {
		if !l.ran[k] {
			ks = append(ks, k)
		}
	}
	return ks
}

// electorRollingRestart starts 3 replicas, restarts each leader in turn
// 3 times with method m, and returns the ticks no replica ran, the ticks
// counted and the longest time from a leader's stop to the next election.
func electorRollingRestart(b *testing.B, open func(testing.TB) (lease.Backend, func()), m electorMethod) (skipped, ticked int, worst time.Duration) {
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: ttl})
	if err != nil {
		b.Fatal(err)
	}
	key := fmt.Sprintf("%s/%d", b.Name(), time.Now().UnixNano())
	ticks := &tickLog{origin: time.Now().Truncate(tick), ran: map[int64]bool{}}
	type elected struct {
		owner string
		at    time.Time
	}
	elections := make(chan elected, 16)

	// start starts a replica; a follower's returns once its Elector's
	// Acquire watches for releases.
	start := func(owner string, follower bool) *electorReplica {
		be, closeStore := open(b)
		w := &watching{Backend: be, ready: make(chan struct{})}
		c, err := lease.NewClient(w, lease.ClientOptions{Owner: owner, SweepEvery: -1})
		if err != nil {
			b.Fatal(err)
		}
		e, err := leasescheduler.NewElector(c, key, p, leasescheduler.ElectorOptions{
			Successors: m.successors,
			OnTransition: func(tr leaseservice.Transition) {
				if tr.Kind == leaseservice.Elected {
					elections <- elected{owner, time.Now()}
				}
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedElector(e), gocron.WithStopTimeout(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		// The job starts on a tick of the grid at least 10ms away, so
		// that every replica's timers fire together.
		first := ticks.origin.Add(time.Duration(ticks.index(time.Now().Add(10*time.Millisecond))) * tick)
		_, err = s.NewJob(gocron.DurationJob(tick), e.Task(func(context.Context, leasescheduler.Run) error {
			ticks.record(time.Now())
			return nil
		}), gocron.WithStartAt(gocron.WithStartDateTime(first)))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := e.Run(ctx); err != nil {
				b.Errorf("%s: Run: %v", owner, err)
			}
		}()
		s.Start()
		if follower {
			select {
			case <-w.ready:
			case <-time.After(time.Minute):
				b.Fatalf("%s: not campaigning after a minute", owner)
			}
		}
		return &electorReplica{owner: owner, stop: func() {
			cancel()
			<-done
			_ = s.Shutdown()
			closeStore()
		}}
	}
	next := func() elected {
		select {
		case x := <-elections:
			return x
		case <-time.After(time.Minute):
			b.Fatal("no replica was elected within a minute")
			return elected{}
		}
	}

	running := map[string]*electorReplica{}
	defer func() {
		for _, r := range running {
			r.stop()
		}
	}()
	running[electorOwners[0]] = start(electorOwners[0], false)
	leader := next()
	from := ticks.index(leader.at) + 1
	for _, o := range electorOwners[1:] {
		running[o] = start(o, true)
	}
	var stops []time.Time
	for range len(electorOwners) {
		time.Sleep(leadTicks * tick)
		stopped := time.Now()
		stops = append(stops, stopped)
		running[leader.owner].stop()
		n := next()
		worst = max(worst, n.at.Sub(stopped))
		running[leader.owner] = start(leader.owner, true)
		leader = n
	}
	time.Sleep(leadTicks * tick)
	// The last tick counted is one that has surely fired.
	to := ticks.index(time.Now().Add(-tick))
	missed := ticks.skipped(from, to)
	for _, k := range missed {
		at := ticks.origin.Add(time.Duration(k) * tick)
		since := time.Duration(-1)
		for _, st := range stops {
			if !st.After(at) {
				since = at.Sub(st)
			}
		}
		b.Logf("tick %d skipped, %v after the last stop of a leader", k, since)
	}
	return len(missed), int(to - from), worst
}
