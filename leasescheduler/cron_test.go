package leasescheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler"
)

// logs is a cron.Logger that keeps what it is told.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) Info(msg string, kv ...any) { l.add("info", msg, kv) }
func (l *logs) Error(err error, msg string, kv ...any) {
	l.add("error", msg+": "+err.Error(), kv)
}

func (l *logs) add(level, msg string, kv []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprint(level, " ", msg, " ", kv))
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func TestCronWrapperRunsTheJobUnderTheLease(t *testing.T) {
	b := leasememory.New(leasememory.Options{})
	p := newPolicy(t, lease.PolicyOptions{TTL: time.Minute})
	l := newLocker(t, newClient(t, b, "a", nil), leasescheduler.Options{Policy: p})
	other := newLocker(t, newClient(t, b, "b", nil), leasescheduler.Options{Policy: p})
	var log logs
	var runs atomic.Int32
	job := cron.NewChain(l.CronWrapper("report", &log)).Then(cron.FuncJob(func() { runs.Add(1) }))

	job.Run()
	if runs.Load() != 1 {
		t.Fatalf("%d runs, want 1", runs.Load())
	}
	held, err := other.Lock(context.Background(), "report")
	if err != nil {
		t.Fatal(err)
	}
	job.Run() // another replica runs it: skipped
	if runs.Load() != 1 || !strings.Contains(log.String(), "skipped") {
		t.Fatalf("%d runs while another replica held the lease; log:\n%s", runs.Load(), log.String())
	}
	if err := held.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	job.Run()
	if runs.Load() != 2 {
		t.Fatalf("%d runs after the other replica unlocked, want 2", runs.Load())
	}
	if r, _ := b.Inspect(context.Background(), l.RunKey("report")); r.Held {
		t.Fatal("the lease is held after the run")
	}
}

func TestCronJobReportsTheJobsError(t *testing.T) {
	l := newLocker(t, newClient(t, leasememory.New(leasememory.Options{}), "a", nil),
		leasescheduler.Options{Policy: newPolicy(t, lease.PolicyOptions{TTL: time.Minute})})
	var log logs
	var token lease.Token
	l.CronJob("report", func(ctx context.Context, r leasescheduler.Run) error {
		token = r.Lease.Token
		return fmt.Errorf("disk full")
	}, &log).Run()
	if token == 0 || !strings.Contains(log.String(), "job failed: disk full") {
		t.Fatalf("token %d; log:\n%s", token, log.String())
	}
}

// TestRobfigCronEachSlotRunsOnce: three robfig/cron schedulers run a fast
// job every second with slots; each slot runs once.
func TestRobfigCronEachSlotRunsOnce(t *testing.T) {
	t.Parallel()
	b := leasememory.New(leasememory.Options{})
	p := schedPolicy(t)
	g := newLedger(nil)
	var log logs
	var crons []*cron.Cron
	for i := range 3 {
		replica := fmt.Sprintf("replica-%d", i)
		l := newLocker(t, newClient(t, b, replica, nil), leasescheduler.Options{Policy: p, Slots: leasescheduler.Every(time.Second)})
		c := cron.New(cron.WithSeconds())
		if _, err := c.AddJob("* * * * * *", l.CronJob("tick", g.job(replica), &log)); err != nil {
			t.Fatal(err)
		}
		crons = append(crons, c)
	}
	for _, c := range crons {
		c.Start()
	}
	g.waitSlots(7)
	for _, c := range crons {
		<-c.Stop().Done()
	}
	starts, runs := g.slots()
	counts := make([]int, len(starts))
	for i, s := range starts {
		counts[i] = len(runs[s])
		if counts[i] != 1 {
			t.Errorf("slot %s ran %d times: %v", s.Format("15:04:05"), counts[i], runs[s])
		}
	}
	if strings.Contains(log.String(), "error") {
		t.Errorf("errors logged:\n%s", log.String())
	}
	t.Logf("robfig/cron: runs per slot: %v", counts)
}
