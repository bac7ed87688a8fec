package leaseservice_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseservice"
	"github.com/golib/lease/leasetest"
)

// fakeWorld is a memory backend and a client on one fake clock.
func fakeWorld(t *testing.T, owner string) (*leasetest.FakeClock, *leasememory.Store, *lease.Client) {
	t.Helper()
	clock := leasetest.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	mem := leasememory.New(leasememory.Options{Clock: clock})
	c, err := lease.NewClient(mem, lease.ClientOptions{Owner: owner, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return clock, mem, c
}

// next returns the next transition, or fails the test after a minute.
func next(t *testing.T, ch <-chan leaseservice.Transition) leaseservice.Transition {
	t.Helper()
	select {
	case tr := <-ch:
		return tr
	case <-time.After(time.Minute):
		t.Fatal("no transition within a minute")
	}
	return leaseservice.Transition{}
}

// TestFailedFunctionRunsAgainWithBackoff: a function that returns an
// error is run again, after a pause that doubles with each consecutive
// failure up to MaxRestartDelay; the lease is released during the pause,
// and Check reports the service healthy throughout.
func TestFailedFunctionRunsAgainWithBackoff(t *testing.T) {
	clock, mem, c := fakeWorld(t, "svc")
	transitions := make(chan leaseservice.Transition, 16)
	calls := 0
	running := make(chan struct{})
	fn := func(ctx context.Context, h *lease.Handle) error {
		calls++
		if calls <= 4 {
			return fmt.Errorf("boom %d", calls)
		}
		close(running)
		<-ctx.Done()
		return nil
	}
	s, err := leaseservice.New(c, "k", policy(t, 10*time.Second), fn, leaseservice.Options{
		RestartDelay:    time.Second,
		MaxRestartDelay: 3 * time.Second,
		OnTransition:    func(tr leaseservice.Transition) { transitions <- tr },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	var last lease.Token
	for i, base := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		if tr := next(t, transitions); tr.Kind != leaseservice.Elected || tr.Token <= last {
			t.Fatalf("failure %d: %+v, want Elected with a token above %d", i+1, tr, last)
		}
		failed := next(t, transitions)
		if failed.Kind != leaseservice.Failed || failed.Err == nil || failed.Err.Error() != fmt.Sprintf("boom %d", i+1) {
			t.Fatalf("failure %d: %+v, want Failed with boom %d", i+1, failed, i+1)
		}
		if d := failed.RestartIn; d > base || d < base*8/10 {
			t.Fatalf("failure %d: RestartIn %v, want %v shortened by at most 20%%", i+1, d, base)
		}
		if tr := next(t, transitions); tr.Kind != leaseservice.Released || tr.Err != nil {
			t.Fatalf("failure %d: %+v, want Released", i+1, tr)
		}
		last = failed.Token
		if r, err := mem.Inspect(ctx, "k"); err != nil || r.Held {
			t.Fatalf("failure %d: during the pause the lease is %+v, %v; want it released", i+1, r, err)
		}
		if err := clock.WaitForTimers(ctx, 1); err != nil { // the pause
			t.Fatal(err)
		}
		if err := s.Check(); err != nil {
			t.Fatalf("failure %d: Check during the pause = %v", i+1, err)
		}
		clock.Advance(failed.RestartIn - time.Millisecond)
		if n := clock.Timers(); n != 1 {
			t.Fatalf("failure %d: %d timers a millisecond before the pause ends, want the pause's", i+1, n)
		}
		clock.Advance(time.Millisecond)
	}
	if tr := next(t, transitions); tr.Kind != leaseservice.Elected {
		t.Fatalf("after the failures: %+v, want Elected", tr)
	}
	<-running
	if err := s.Check(); err != nil {
		t.Fatalf("Check while the function runs = %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after ctx ended", err)
	}
}

// TestBackoffResetsAfterAGoodTerm: a term that runs for MaxRestartDelay
// before failing counts as a fresh start, so the next pause is
// RestartDelay again.
func TestBackoffResetsAfterAGoodTerm(t *testing.T) {
	clock, _, c := fakeWorld(t, "svc")
	transitions := make(chan leaseservice.Transition, 16)
	var calls atomic.Int32
	fn := func(ctx context.Context, h *lease.Handle) error {
		switch calls.Add(1) {
		case 1, 2:
			return errors.New("boom")
		case 3: // runs for longer than MaxRestartDelay, then fails
			t := clock.NewTimer(31 * time.Second)
			defer t.Stop()
			select {
			case <-t.C():
			case <-ctx.Done():
				return nil
			}
			return errors.New("late boom")
		}
		<-ctx.Done()
		return nil
	}
	// A TTL of two minutes: the long term needs no renewal on the fake
	// clock.
	s, err := leaseservice.New(c, "k", policy(t, 2*time.Minute), fn, leaseservice.Options{
		RestartDelay:    time.Second,
		MaxRestartDelay: 30 * time.Second,
		OnTransition:    func(tr leaseservice.Transition) { transitions <- tr },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var pauses []time.Duration
	elected := 0
	for len(pauses) < 3 {
		tr := next(t, transitions)
		switch tr.Kind {
		case leaseservice.Failed:
			pauses = append(pauses, tr.RestartIn)
		case leaseservice.Released:
			if err := clock.WaitForTimers(ctx, 1); err != nil {
				t.Fatal(err)
			}
			clock.Advance(pauses[len(pauses)-1])
		case leaseservice.Elected:
			if elected++; elected == 3 { // the long term: let its 31s pass
				if err := clock.WaitForTimers(ctx, 2); err != nil { // its timer and the renewer's
					t.Fatal(err)
				}
				clock.Advance(31 * time.Second)
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if pauses[1] < 1600*time.Millisecond || pauses[2] > time.Second {
		t.Fatalf("pauses %v: want about 1s, 2s, then 1s again after the long term", pauses)
	}
}

// TestStopOnErrorEndsRun: with StopOnError, Run returns the function's
// error after releasing the lease, as a supervisor that restarts the
// process expects.
func TestStopOnErrorEndsRun(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	boom := errors.New("boom")
	var kinds []leaseservice.TransitionKind
	s, err := leaseservice.New(client(t, mem, "svc"), "k", policy(t, time.Second),
		func(ctx context.Context, h *lease.Handle) error { return boom },
		leaseservice.Options{StopOnError: true, OnTransition: func(tr leaseservice.Transition) {
			kinds = append(kinds, tr.Kind)
			if tr.Kind == leaseservice.Failed && tr.RestartIn != 0 {
				t.Errorf("Failed with StopOnError has RestartIn %v", tr.RestartIn)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
	if fmt.Sprint(kinds) != "[elected failed released]" {
		t.Fatalf("transitions %v", kinds)
	}
	if r, _ := mem.Inspect(context.Background(), "k"); r.Held {
		t.Fatal("lease not released after the function failed")
	}
	if err := s.Check(); err == nil || !errors.Is(err, boom) {
		t.Fatalf("Check after Run returned = %v, want the function's error", err)
	}
}
