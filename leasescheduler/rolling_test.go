package leasescheduler_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler"
	"github.com/golib/lease/leaseservice"
)

// TestRollingRestartHandsOff: three Electors, each listing the others as
// successors, run a task that ticks every 50ms on whichever leads. Three
// times the leader is stopped and started again, as a rolling restart
// does: each time it hands the lease off to one of the others, which
// takes over with a higher token. The ticks that found no leader are
// counted and logged; the count depends on the machine's timing, so it
// is not asserted.
func TestRollingRestartHandsOff(t *testing.T) {
	b := leasememory.New(leasememory.Options{})
	p := newPolicy(t, lease.PolicyOptions{TTL: 2 * time.Second})
	owners := []string{"replica-0", "replica-1", "replica-2"}
	transitions := make(chan struct {
		owner string
		tr    leaseservice.Transition
	}, 64)

	var mu sync.Mutex
	electors := map[string]*leasescheduler.Elector{}
	stops := map[string]func(){}
	startReplica := func(owner string) {
		e, err := leasescheduler.NewElector(newClient(t, b, owner, nil), "jobs/leader", p, leasescheduler.ElectorOptions{
			Successors: owners,
			OnTransition: func(tr leaseservice.Transition) {
				transitions <- struct {
					owner string
					tr    leaseservice.Transition
				}{owner, tr}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := e.Run(ctx); err != nil {
				t.Errorf("%s: Run = %v", owner, err)
			}
		}()
		mu.Lock()
		electors[owner] = e
		stops[owner] = func() {
			cancel()
			<-done
			mu.Lock()
			delete(electors, owner)
			mu.Unlock()
		}
		mu.Unlock()
	}
	defer func() {
		mu.Lock()
		all := make([]func(), 0, len(stops))
		for _, stop := range stops {
			all = append(all, stop)
		}
		mu.Unlock()
		for _, stop := range all {
			stop()
		}
	}()
	next := func() (string, leaseservice.Transition) {
		t.Helper()
		select {
		case x := <-transitions:
			return x.owner, x.tr
		case <-time.After(30 * time.Second):
			t.Fatal("no transition within 30s")
		}
		return "", leaseservice.Transition{}
	}

	// The task: every 50ms, run by the replica that leads, if any.
	ticks, skipped := 0, 0
	tickerDone := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(tickerDone)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			ran := false
			mu.Lock()
			for _, e := range electors {
				if e.IsLeader(context.Background()) == nil {
					ran = true
				}
			}
			ticks++
			if !ran {
				skipped++
			}
			mu.Unlock()
		}
	}()

	startReplica(owners[0])
	leader, tr := next()
	if tr.Kind != leaseservice.Elected {
		t.Fatalf("%s: first transition %v, want elected", leader, tr.Kind)
	}
	token := tr.Token
	for _, o := range owners[1:] {
		startReplica(o)
	}
	// waitTicks lets the task tick n more times.
	waitTicks := func(n int) {
		mu.Lock()
		until := ticks + n
		mu.Unlock()
		for {
			time.Sleep(10 * time.Millisecond)
			mu.Lock()
			now := ticks
			mu.Unlock()
			if now >= until {
				return
			}
		}
	}
	for round := range 3 {
		waitTicks(3)
		mu.Lock()
		stop := stops[leader]
		mu.Unlock()
		stop()
		// The old leader's HandedOff and the successor's Elected come from
		// two goroutines: the successor may report its election before
		// the old leader's HandOff call has returned to report the
		// hand-off. Wait for both, in either order.
		handedOff, successor := false, ""
		var elected leaseservice.Transition
		for !handedOff || successor == "" {
			owner, tr := next()
			switch {
			case owner == leader && tr.Kind == leaseservice.HandedOff && !handedOff:
				want := slices.DeleteFunc(slices.Clone(owners), func(o string) bool { return o == leader })
				if tr.Token != token || !slices.Equal(tr.Candidates, want) {
					t.Fatalf("round %d: %s handed off %+v, want token %d offered to %v", round, leader, tr, token, want)
				}
				handedOff = true
			case owner != leader && tr.Kind == leaseservice.Elected && successor == "":
				successor, elected = owner, tr
			default:
				t.Fatalf("round %d: %s: transition %v (%v), want %s to hand off and one other to be elected", round, owner, tr.Kind, tr.Err, leader)
			}
		}
		if elected.Token <= token {
			t.Fatalf("round %d: %s elected with token %d, want above %d", round, successor, elected.Token, token)
		}
		startReplica(leader) // the restarted replica comes back as a follower
		leader, token = successor, elected.Token
	}
	waitTicks(3)
	close(quit)
	<-tickerDone
	t.Logf("%d ticks of 50ms over three hand-offs, %d found no leader", ticks, skipped)
}
