package leasescheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/internal/testkit/backendenv"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler"
	"github.com/golib/lease/leasetest"
)

func newPolicy(t testing.TB, o lease.PolicyOptions) lease.Policy {
	t.Helper()
	p, err := lease.NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newClient(t testing.TB, b lease.Backend, owner string, clock lease.Clock) *lease.Client {
	t.Helper()
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: owner, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newLocker(t testing.TB, c *lease.Client, o leasescheduler.Options) *leasescheduler.Locker {
	t.Helper()
	l, err := leasescheduler.NewLocker(c, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// fakeReplicas returns n Lockers on one memory backend and one fake clock,
// with one run per minute-long slot.
func fakeReplicas(t *testing.T, n int) ([]*leasescheduler.Locker, *leasememory.Store, *leasetest.FakeClock) {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	b := leasememory.New(leasememory.Options{Clock: clock})
	p := newPolicy(t, lease.PolicyOptions{TTL: 10 * time.Second})
	var out []*leasescheduler.Locker
	for i := range n {
		c := newClient(t, b, "replica-"+string(rune('a'+i)), clock)
		out = append(out, newLocker(t, c, leasescheduler.Options{Policy: p, Slots: leasescheduler.Every(time.Minute)}))
	}
	return out, b, clock
}

func TestLockNeverWaitsForAHolder(t *testing.T) {
	b := leasememory.New(leasememory.Options{})
	p := newPolicy(t, lease.PolicyOptions{TTL: time.Minute, Wait: time.Minute})
	a := newLocker(t, newClient(t, b, "a", nil), leasescheduler.Options{Policy: p})
	other := newLocker(t, newClient(t, b, "b", nil), leasescheduler.Options{Policy: p})
	ctx := context.Background()
	k, err := a.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := other.Lock(ctx, "report"); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("second Lock = %v, want ErrNotAcquired", err)
	}
	if waited := time.Since(start); waited > 30*time.Second {
		t.Fatalf("Lock waited %v for the holder despite Wait", waited) // a bound far from any timing noise
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	k, err = other.Lock(ctx, "report")
	if err != nil {
		t.Fatalf("Lock after Unlock = %v", err)
	}
	_ = k.Unlock(ctx)
}

// TestOneRunPerSlotOnTheFakeClock: three replicas lock the same slot one
// after the other, each unlocking at once (a fast job): only the first
// runs. The next slot runs once again, and the slots take turns on three
// keys.
func TestOneRunPerSlotOnTheFakeClock(t *testing.T) {
	replicas, b, clock := fakeReplicas(t, 3)
	ctx := context.Background()
	keys := map[string]bool{}
	for slot := range 5 {
		runs := 0
		for _, r := range replicas {
			clock.Advance(10 * time.Millisecond) // timers milliseconds apart
			k, err := r.Lock(ctx, "report")
			if errors.Is(err, lease.ErrNotAcquired) {
				continue
			} else if err != nil {
				t.Fatalf("slot %d: Lock = %v", slot, err)
			}
			runs++
			run := k.(*leasescheduler.Lock).Run()
			keys[r.SlotKey("report", run.Slot)] = true
			if err := k.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if runs != 1 {
			t.Fatalf("slot %d ran %d times, want once", slot, runs)
		}
		clock.Advance(time.Minute - 30*time.Millisecond)
	}
	if len(keys) != 3 {
		t.Errorf("slot keys used: %v, want three", keys)
	}
	// The run's lease was released each time; the last slot's lease is held
	// until half an interval after the slot.
	if r, _ := b.Inspect(ctx, replicas[0].RunKey("report")); r.Held {
		t.Error("the run's lease is held after Unlock")
	}
}

func TestUnlockWithACancelledContextReleases(t *testing.T) {
	kinds := append([]struct {
		Name string
		Env  func(testing.TB) *backendenv.Env
	}{{"memory", nil}}, backendenv.Kinds...)
	for _, kind := range kinds {
		t.Run(kind.Name, func(t *testing.T) {
			t.Parallel()
			var b lease.Backend = leasememory.New(leasememory.Options{})
			if kind.Env != nil {
				env := kind.Env(t)
				b = env.NewBackend(t, env.Addr)
			}
			l := newLocker(t, newClient(t, b, "a", nil), leasescheduler.Options{Policy: newPolicy(t, lease.PolicyOptions{TTL: time.Minute})})
			ctx, cancel := context.WithCancel(context.Background())
			k, err := l.Lock(ctx, "report")
			if err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := k.Unlock(ctx); err != nil {
				t.Fatalf("Unlock with a cancelled context = %v", err)
			}
			if r, err := b.Inspect(context.Background(), l.RunKey("report")); err != nil || r.Held {
				t.Fatalf("after Unlock: %+v, %v; want the lease free", r, err)
			}
			if err := k.Unlock(ctx); err != nil {
				t.Fatalf("second Unlock = %v, want the first's result", err)
			}
		})
	}
}

func TestTaskGetsTheLeaseAndLosesIt(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	b := leasememory.New(leasememory.Options{Clock: clock})
	p := newPolicy(t, lease.PolicyOptions{TTL: 10 * time.Second})
	l := newLocker(t, newClient(t, b, "a", clock), leasescheduler.Options{Policy: p})
	ctx := context.Background()
	k, err := l.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	lk := k.(*leasescheduler.Lock)
	if got := lk.Run(); got.Job != "report" || !got.Lease.Valid() || !got.Slot.IsZero() {
		t.Fatalf("Run() = %+v", got)
	}
	// The lease expires on the backend (the fake clock jumps past the
	// TTL), so the next renewal finds it gone: the run's context ends.
	if err := clock.WaitForTimers(ctx, 1); err != nil { // the renewer sleeps
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	select {
	case <-lk.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the run's context did not end after the lease was lost")
	}
	if err := context.Cause(lk.Context()); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("cause %v, want ErrLost", err)
	}
	if err := k.Unlock(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Unlock after a loss = %v, want the loss", err)
	}
}

func TestNewLockerValidates(t *testing.T) {
	c := newClient(t, leasememory.New(leasememory.Options{}), "a", nil)
	p := newPolicy(t, lease.PolicyOptions{TTL: time.Second})
	if _, err := leasescheduler.NewLocker(c, leasescheduler.Options{Policy: p, Prefix: "jobs\n"}); err == nil {
		t.Error("control character in Prefix: NewLocker succeeded")
	}
	if _, err := leasescheduler.NewLocker(nil, leasescheduler.Options{Policy: p}); err == nil {
		t.Error("nil client: NewLocker succeeded")
	}
}

// TestZeroOptionsLocker: a Locker from zero Options holds each run's lease
// for DefaultTTL under DefaultPrefix.
func TestZeroOptionsLocker(t *testing.T) {
	b := leasememory.New(leasememory.Options{})
	l := newLocker(t, newClient(t, b, "a", nil), leasescheduler.Options{})
	ctx := context.Background()
	k, err := l.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Unlock(ctx)
	if key := l.RunKey("report"); key != leasescheduler.DefaultPrefix+"run/report" {
		t.Fatalf("RunKey = %q", key)
	}
	r, err := b.Inspect(ctx, l.RunKey("report"))
	if err != nil || !r.Held || r.Remaining > leasescheduler.DefaultTTL || r.Remaining < leasescheduler.DefaultTTL-5*time.Second {
		t.Fatalf("the run's lease: %+v, %v; want held for about %v", r, err, leasescheduler.DefaultTTL)
	}
}
