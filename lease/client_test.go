package lease_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
)

func TestNewClientRejects(t *testing.T) {
	if _, err := lease.NewClient(nil, lease.ClientOptions{Owner: "o"}); err == nil {
		t.Error("NewClient(nil backend) succeeded")
	}
	if _, err := lease.NewClient(memory.New(memory.Options{}), lease.ClientOptions{}); !errors.Is(err, lease.ErrInvalidOwner) {
		t.Errorf("NewClient without owner = %v, want ErrInvalidOwner", err)
	}
}

func TestAcquireZeroPolicy(t *testing.T) {
	f := newFixture(t)
	if _, err := f.c.Acquire(context.Background(), "k", lease.Policy{}); !errors.Is(err, lease.ErrInvalidPolicy) {
		t.Fatalf("Acquire with the zero Policy = %v, want ErrInvalidPolicy", err)
	}
}

func TestAcquireStopsAtMaxAttempts(t *testing.T) {
	f := newFixture(t)
	holder := f.acquire(t)
	other, _ := lease.NewClient(f.b, lease.ClientOptions{Owner: "other", Clock: f.clock, Observer: f.obs})
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Retry: time.Second, Wait: time.Minute, MaxAttempts: 4})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := other.Acquire(context.Background(), "k", p); done <- err }()
	err = f.await(t, done)
	var na *lease.NotAcquiredError
	if !errors.As(err, &na) || na.Holder != "test" || na.Token != holder.Token() {
		t.Fatalf("Acquire = %v, want NotAcquiredError naming holder test and its token", err)
	}
	if failed := f.obs.lastAcquireFailed(); failed == nil || failed.Attempts != 4 {
		t.Fatalf("AcquireFailed event %+v, want 4 attempts", failed)
	}
	if elapsed := f.clock.Now().Sub(epoch); elapsed > 4*time.Second {
		t.Fatalf("gave up after %v of fake time, want about 3 retries of 1s", elapsed)
	}
}

// await advances f's clock in steps of 100ms, each once a sleeper is
// waiting (or 10ms passed), until done delivers a result.
func (f *fixture) await(t *testing.T, done <-chan error) error {
	t.Helper()
	for range 1000 {
		select {
		case err := <-done:
			return err
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_ = f.clock.WaitForTimers(ctx, 1)
		cancel()
		f.clock.Advance(100 * time.Millisecond)
	}
	t.Fatal("Acquire did not give up")
	return nil
}

// lastAcquireFailed returns the last AcquireFailed event recorded, or nil.
func (r *recorder) lastAcquireFailed() *lease.AcquireFailed {
	r.mu.Lock()
	defer r.mu.Unlock()
	var failed *lease.AcquireFailed
	for _, e := range r.events {
		if e, ok := e.(*lease.AcquireFailed); ok {
			failed = e
		}
	}
	return failed
}

func TestAcquireWakesEarlyWhenHolderExpires(t *testing.T) {
	// A waiter sleeps no longer than the holder's remaining time.
	f := newFixture(t)
	short, err := lease.NewPolicy(lease.PolicyOptions{TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Acquire(context.Background(), "k", short); err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Retry: 5 * time.Second, Wait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := f.c.Acquire(context.Background(), "k", p); done <- err }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.clock.WaitForTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(100 * time.Millisecond)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Acquire after the holder expired: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter slept past the holder's expiry")
	}
}

func TestErrorsNameOperationAndKey(t *testing.T) {
	f := newFixture(t)
	h := f.acquire(t)
	f.b.failWith(errors.New("boom"))
	err := h.Renew(context.Background())
	if got, want := err.Error(), `lease: renew "k": boom`; got != want {
		t.Fatalf("Renew error %q, want %q", got, want)
	}
	f.b.failWith(&lease.LostError{Key: "k", Token: 7, Reason: lease.Expired})
	if got, want := h.Renew(context.Background()).Error(), `lease: "k" token 7 lost: expired`; got != want {
		t.Fatalf("Renew error %q, want %q", got, want)
	}
	if !strings.Contains((&lease.NotAcquiredError{Key: "k", Holder: "h", Token: 3, Remaining: time.Second}).Error(), `"k" is held by "h" (token 3) for another 1s`) {
		t.Fatal("NotAcquiredError text")
	}
}

func TestIndeterminate(t *testing.T) {
	cause := context.DeadlineExceeded
	err := lease.Indeterminate(cause)
	if !errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, cause) {
		t.Fatalf("Indeterminate(%v) = %v, want it to match both", cause, err)
	}
	if lease.Indeterminate(nil) != nil {
		t.Fatal("Indeterminate(nil) != nil")
	}
	if lease.Indeterminate(err) != err {
		t.Fatal("Indeterminate wrapped twice")
	}
}

// TestObservers sends every event kind through every adapter.
func TestObservers(t *testing.T) {
	info := lease.EventInfo{Key: "k", Owner: "o", Token: 9, Latency: time.Millisecond}
	failed := info
	failed.Err = errors.New("boom")
	events := []struct {
		e     lease.Event
		msg   string
		level slog.Level
	}{
		{&lease.Acquired{EventInfo: info, Attempts: 1}, "lease acquired", slog.LevelInfo},
		{&lease.AcquireFailed{EventInfo: failed, Attempts: 2}, "lease not acquired", slog.LevelWarn},
		{&lease.AcquireFailed{EventInfo: lease.EventInfo{Key: "k", Err: &lease.NotAcquiredError{Key: "k"}}, Attempts: 1}, "lease not acquired", slog.LevelDebug},
		{&lease.Renewed{EventInfo: info}, "lease renewed", slog.LevelDebug},
		{&lease.RenewFailed{EventInfo: failed}, "lease renewal failed", slog.LevelWarn},
		{&lease.Lost{EventInfo: failed}, "lease lost", slog.LevelError},
		{&lease.Released{EventInfo: info}, "lease released", slog.LevelInfo},
		{&lease.ReleaseFailed{EventInfo: failed}, "lease release failed", slog.LevelError},
		{&lease.ReleaseFailed{EventInfo: lease.EventInfo{Key: "k", Err: &lease.LostError{Key: "k", Reason: lease.Expired}}}, "lease release failed", slog.LevelWarn},
		{&lease.ReleaseFailed{EventInfo: lease.EventInfo{Key: "k", Err: lease.Indeterminate(errors.New("timeout"))}}, "lease release failed", slog.LevelError},
		{&lease.AcquireFailed{EventInfo: lease.EventInfo{Key: "k", Err: context.Canceled}}, "lease not acquired", slog.LevelDebug},
	}
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var fanned []lease.Event
	obs := lease.MultiObserver(lease.NewSlogObserver(logger), nil, lease.NopObserver,
		lease.ObserverFunc(func(e lease.Event) { fanned = append(fanned, e) }))
	for _, tc := range events {
		buf.Reset()
		obs.Observe(tc.e)
		line := buf.String()
		for _, want := range []string{"level=" + tc.level.String(), `msg="` + tc.msg + `"`, "key=k"} {
			if !strings.Contains(line, want) {
				t.Errorf("%T logged %q, missing %q", tc.e, line, want)
			}
		}
		if tc.e.Info().Err != nil && !strings.Contains(line, "error=") {
			t.Errorf("%T logged %q without its error", tc.e, line)
		}
	}
	lease.NewSlogObserver(nil).Observe(events[0].e) // silent, and no panic
	if len(fanned) != len(events) {
		t.Fatalf("MultiObserver passed on %d events, want %d", len(fanned), len(events))
	}
}

func TestAcquireGivesUpWhenWaitRunsOut(t *testing.T) {
	// No MaxAttempts: Wait alone ends the retries, and no pause runs past
	// it.
	f := newFixture(t)
	f.acquire(t)
	other, _ := lease.NewClient(f.b, lease.ClientOptions{Owner: "other", Clock: f.clock, Observer: f.obs})
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Retry: time.Second, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := other.Acquire(context.Background(), "k", p); done <- err }()
	if err := f.await(t, done); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("Acquire = %v, want ErrNotAcquired", err)
	}
	if elapsed := f.clock.Now().Sub(epoch); elapsed > 5*time.Second+100*time.Millisecond {
		t.Fatalf("gave up after %v of fake time, past Wait (5s)", elapsed)
	}
	// Retry 1s shortened by up to 20%: 5 to 7 attempts in 5s.
	if failed := f.obs.lastAcquireFailed(); failed == nil || failed.Attempts < 5 || failed.Attempts > 7 {
		t.Fatalf("AcquireFailed event %+v, want 5 to 7 attempts within Wait", failed)
	}
}

func TestAcquireCancelledWhileWaiting(t *testing.T) {
	// The context ends while Acquire sleeps between attempts: it returns
	// the context's cause at once, not ErrNotAcquired, and holds nothing.
	f := newFixture(t)
	holder := f.acquire(t)
	other, _ := lease.NewClient(f.b, lease.ClientOptions{Owner: "other", Clock: f.clock})
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Retry: time.Second, Wait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { _, err := other.Acquire(ctx, "k", p); done <- err }()
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	if err := f.clock.WaitForTimers(wctx, 1); err != nil {
		t.Fatal(err) // Acquire never went to sleep between attempts
	}
	shutdown := errors.New("shutting down")
	cancel(shutdown)
	select {
	case err := <-done:
		if !errors.Is(err, shutdown) || errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("Acquire = %v, want the context's cause and not ErrNotAcquired", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire did not return when its context was cancelled")
	}
	r, err := f.c.Inspect(context.Background(), "k")
	if err != nil || !r.Held || r.Token != holder.Token() {
		t.Fatalf("Inspect = %+v, %v; want the first holder untouched", r, err)
	}
}
