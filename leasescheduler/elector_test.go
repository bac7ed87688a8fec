package leasescheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler"
)

// TestElectorRunsJobsOnTheLeaderOnly: three gocron schedulers with an
// Elector each run a job every second; only the leader runs it, with the
// leader's token, and when the leader stops campaigning another replica
// takes over.
func TestElectorRunsJobsOnTheLeaderOnly(t *testing.T) {
	t.Parallel()
	b := leasememory.New(leasememory.Options{})
	p := newPolicy(t, lease.PolicyOptions{TTL: 2 * time.Second})
	type run struct {
		replica string
		token   lease.Token
		at      time.Time
	}
	var mu sync.Mutex
	var runs []run
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: the campaigns end with ctx
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	campaigns := make([]context.CancelFunc, 3)
	var electors []*leasescheduler.Elector
	for i := range 3 {
		replica := fmt.Sprintf("replica-%d", i)
		e, err := leasescheduler.NewElector(newClient(t, b, replica, nil), "jobs/leader", p, leasescheduler.ElectorOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.IsLeader(ctx); !errors.Is(err, leasescheduler.ErrNotLeader) {
			t.Fatalf("IsLeader before Run = %v, want ErrNotLeader", err)
		}
		if err := e.Check(); err == nil {
			t.Fatal("Check before Run = nil, want the Elector not campaigning")
		}
		electors = append(electors, e)
		cctx, stop := context.WithCancel(ctx)
		campaigns[i] = stop
		wg.Go(func() {
			if err := e.Run(cctx); err != nil {
				t.Errorf("%s: Elector.Run = %v", replica, err)
			}
		})
		s := newScheduler(t, gocron.WithDistributedElector(e))
		_, err = s.NewJob(gocron.CronJob("* * * * * *", true), e.Task(func(ctx context.Context, r leasescheduler.Run) error {
			mu.Lock()
			runs = append(runs, run{replica, r.Lease.Token, time.Now()})
			mu.Unlock()
			return nil
		}), gocron.WithName("tick"))
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		defer s.Shutdown()
	}
	waitRuns := func(n int) []run {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			mu.Lock()
			got := len(runs)
			mu.Unlock()
			if got >= n {
				break
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]run(nil), runs...)
	}
	before := waitRuns(3)
	for i, e := range electors {
		if err := e.Check(); err != nil {
			t.Errorf("replica-%d: Check while campaigning or leading = %v", i, err)
		}
	}
	if len(before) < 3 {
		t.Fatalf("%d runs in the first seconds", len(before))
	}
	leader, token := before[0].replica, before[0].token
	for _, r := range before {
		if r.replica != leader || r.token != token {
			t.Fatalf("runs %v: not all on one leader's term", before)
		}
	}
	var idx int
	fmt.Sscanf(leader, "replica-%d", &idx)
	campaigns[idx]() // the leader stops campaigning and releases
	stoppedAt := time.Now()

	all := waitRuns(len(before) + 4)
	var next *run
	for i, r := range all {
		if r.at.After(stoppedAt) && r.replica != leader {
			next = &all[i]
			break
		}
	}
	if next == nil {
		t.Fatalf("no other replica ran the job after the leader stopped: %v", all)
	}
	for _, r := range all {
		if r.at.After(next.at) && (r.replica == leader || r.token != next.token) {
			t.Errorf("run %+v after %s took over", r, next.replica)
		}
	}
	if next.token <= token {
		t.Errorf("new leader's token %d, want above %d", next.token, token)
	}
	t.Logf("%s led with token %d; %s ran the job %v after it stopped", leader, token, next.replica, next.at.Sub(stoppedAt).Round(time.Millisecond))
}
