package leasescheduler

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

// TestJobClaimsTheRunsLock: the task of Locker.Job runs with the one Lock
// its locker holds that no run has claimed, refuses to run without one,
// and, when an earlier run's lease was lost and the next run locked
// before the earlier one ended, the next run gets the new Lock.
func TestJobClaimsTheRunsLock(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	b := leasememory.New(leasememory.Options{Clock: clock})
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "a", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLocker(c, Options{Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	var got []lease.Token
	_, gl := l.Job("report", func(_ context.Context, run Run) error {
		got = append(got, run.Lease.Token)
		return nil
	})
	j := gl.(*jobLocker)
	ctx := context.Background()

	if err := j.run(ctx); !errors.Is(err, ErrNoLock) {
		t.Fatalf("run without a Lock = %v, want ErrNoLock", err)
	}
	first, err := j.Lock(ctx, "gocron's name for the job")
	if err != nil {
		t.Fatal(err)
	}
	k1, err := j.claim()
	if err != nil || k1 != first || k1.Run().Job != "report" {
		t.Fatalf("claim = %v, %v; want the first Lock, of job report", k1, err)
	}
	if _, err := j.claim(); !errors.Is(err, ErrNoLock) {
		t.Fatalf("a second claim of one Lock = %v, want ErrNoLock", err)
	}

	// The first run's lease expires on the backend while the run goes on;
	// the next run locks.
	if err := clock.WaitForTimers(ctx, 1); err != nil { // the renewer sleeps
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	<-k1.Context().Done()
	second, err := j.Lock(ctx, "gocron's name for the job")
	if err != nil {
		t.Fatalf("Lock after the first lease was lost = %v", err)
	}
	if err := j.run(ctx); err != nil {
		t.Fatal(err)
	}
	if want := second.(*Lock).Run().Lease.Token; len(got) != 1 || got[0] != want {
		t.Fatalf("the second run got tokens %v, want [%d] (the second Lock's)", got, want)
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Unlock(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Unlock of the lost lease = %v, want ErrLost", err)
	}

	// Two Locks that no run claimed: the run's is not known.
	if _, err := j.Lock(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := clock.WaitForTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	if _, err := j.Lock(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := j.run(ctx); !errors.Is(err, ErrNoLock) {
		t.Fatalf("run with two unclaimed Locks = %v, want ErrNoLock", err)
	}
	for _, k := range slices.Clone(j.held) {
		_ = k.Unlock(ctx)
	}
	if len(j.held) != 0 {
		t.Fatalf("%d Locks held after Unlock", len(j.held))
	}
}
