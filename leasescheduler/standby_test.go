package leasescheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/internal/testkit/backendenv"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler"
	"github.com/golib/lease/leaseservice"
	"github.com/golib/lease/leasetest"
)

// elector runs an Elector as the contender of a backendenv.Standby test.
func elector(ctx context.Context, c *lease.Client, key string, p lease.Policy, elected func()) (func() error, <-chan error) {
	done := make(chan error, 1)
	e, err := leasescheduler.NewElector(c, key, p, leasescheduler.ElectorOptions{
		OnTransition: func(tr leaseservice.Transition) {
			if tr.Kind == leaseservice.Elected {
				elected()
			}
		},
	})
	if err != nil {
		done <- err
		return nil, done
	}
	go func() { done <- e.Run(ctx) }()
	return e.Check, done
}

// TestIdleElectorIsQuiet: an Elector waiting for the leader's lease makes
// at most one Acquire call per TTL (and the first), on every backend.
func TestIdleElectorIsQuiet(t *testing.T) { backendenv.CheckQuiet(t, elector) }

// TestElectorTakesOverByNotification: a waiting Elector whose clock stands
// still is elected after the leader's release only by the notification,
// and where the backend can poll instead, only when it asks.
func TestElectorTakesOverByNotification(t *testing.T) { backendenv.CheckHandOver(t, elector) }

// TestSkippedRunsAskOnce: a run whose job another replica runs makes one
// Acquire call and nothing else, whether gocron asks the Locker or a
// robfig/cron job does; with Slots, the slot's refusal ends it with that
// one call. A scheduler polls no more than its schedule asks.
func TestSkippedRunsAskOnce(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	mem := leasememory.New(leasememory.Options{Clock: clock})
	p := newPolicy(t, lease.PolicyOptions{TTL: time.Minute, Wait: time.Hour})
	ctx := context.Background()
	for _, o := range []leasescheduler.Options{{Policy: p}, {Policy: p, Slots: leasescheduler.Every(time.Hour), Clock: clock}} {
		holder := newLocker(t, newClient(t, mem, "holder", clock), o)
		k, err := holder.Lock(ctx, "report")
		if err != nil {
			t.Fatal(err)
		}
		b, calls := leasetest.CountCalls(mem)
		other := newLocker(t, newClient(t, b, "other", clock), o)
		const runs = 3
		for range runs {
			if _, err := other.Lock(ctx, "report"); !errors.Is(err, lease.ErrNotAcquired) {
				t.Fatalf("Lock of a held job = %v, want ErrNotAcquired", err)
			}
			other.CronJob("report", func(context.Context, leasescheduler.Run) error {
				t.Error("a skipped run ran")
				return nil
			}, cron.DiscardLogger).Run()
		}
		if n, all := calls.Acquire.Load(), calls.Total(); n != 2*runs || all != n {
			t.Errorf("slots %v: %d skipped runs made %d Acquire calls and %d calls in all, want one Acquire call each", o.Slots != nil, 2*runs, n, all)
		}
		if err := k.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Hour) // past the slot's lease
	}
}
