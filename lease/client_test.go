package lease_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
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
	other, _ := lease.NewClient(vague{f.b}, lease.ClientOptions{Owner: "other", Clock: f.clock, Observer: f.obs})
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
	// The holder's 100ms, and at most a fifth of it to spread waiters.
	f.clock.Advance(120 * time.Millisecond)
	wantGranted(t, done, "after the holder expired", "the waiter slept past the holder's expiry")
}

// wantGranted fails t unless the Acquire that reports on done returns nil
// within 5s of real time: after says when it was asked for, and late what
// a waiter still waiting would mean.
func wantGranted(t *testing.T, done <-chan error, after, late string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Acquire %s = %v", after, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal(late)
	}
}

// TestErrorTexts holds the exact text of every error of package lease:
// each names the operation and the subject once, without stutter.
func TestErrorTexts(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	type errCase struct {
		name string
		err  func(t *testing.T, f *fixture) error
		want string
	}
	cases := []errCase{
		{"NewClient nil backend", func(*testing.T, *fixture) error {
			_, err := lease.NewClient(nil, lease.ClientOptions{Owner: "o"})
			return err
		}, `lease: NewClient: nil Backend`},
		{"NewClient invalid owner", func(*testing.T, *fixture) error {
			_, err := lease.NewClient(memory.New(memory.Options{}), lease.ClientOptions{})
			return err
		}, `lease: NewClient: invalid owner: empty`},
		{"NewClient owner with a newline", func(*testing.T, *fixture) error {
			_, err := lease.NewClient(memory.New(memory.Options{}), lease.ClientOptions{Owner: "a\nb"})
			return err
		}, `lease: NewClient: invalid owner "a\nb": control character U+000A at byte 1`},
		{"ValidateKey", func(*testing.T, *fixture) error { return lease.ValidateKey("") }, `lease: invalid key: empty`},
		{"ValidateOwner too long", func(*testing.T, *fixture) error { return lease.ValidateOwner(strings.Repeat("o", 257)) },
			`lease: invalid owner: 257 bytes, longer than the limit of 256`},
		{"Acquire invalid key", func(_ *testing.T, f *fixture) error {
			_, err := f.c.Acquire(ctx, "", f.p)
			return err
		}, `lease: acquire: invalid key: empty`},
		{"Inspect invalid key", func(_ *testing.T, f *fixture) error {
			_, err := f.c.Inspect(ctx, "bad\xff")
			return err
		}, `lease: inspect: invalid key "bad\xff": invalid UTF-8 at byte 3`},
		{"Acquire zero policy", func(_ *testing.T, f *fixture) error {
			_, err := f.c.Acquire(ctx, "k", lease.Policy{})
			return err
		}, `lease: acquire "k": invalid policy: the zero Policy; build one with NewPolicy`},
		{"NewPolicy", func(*testing.T, *fixture) error { _, err := lease.NewPolicy(lease.PolicyOptions{}); return err },
			`lease: invalid policy: TTL (0s) must be between 10ms and 24h0m0s`},
		{"Acquire held", func(t *testing.T, f *fixture) error {
			f.acquire(t)
			_, err := f.other(t).TryAcquire(ctx, "k", f.p)
			return err
		}, `lease: acquire "k": held by "test" (token 1) for another 30s`},
		{"Acquire cancelled before I/O", func(_ *testing.T, f *fixture) error {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			_, err := f.c.Acquire(cctx, "k", f.p)
			return err
		}, `lease: acquire "k": context canceled`},
		{"Acquire unanswered, then released", func(_ *testing.T, f *fixture) error {
			c, _ := lease.NewClient(&unanswered{Backend: f.store, apply: true}, lease.ClientOptions{Owner: "test", Clock: f.clock})
			_, err := c.TryAcquire(ctx, "k", f.p)
			return err
		}, `lease: acquire "k": outcome unknown: reply lost (the clean-up release ended what an attempt had granted; a delayed attempt may still be granted)`},
		{"Acquire unanswered, nothing held", func(_ *testing.T, f *fixture) error {
			c, _ := lease.NewClient(&unanswered{Backend: f.store}, lease.ClientOptions{Owner: "test", Clock: f.clock})
			_, err := c.TryAcquire(ctx, "k", f.p)
			return err
		}, `lease: acquire "k": outcome unknown: reply lost (the clean-up release found nothing held; a delayed attempt may still be granted)`},
		{"Acquire unanswered, release failed", func(_ *testing.T, f *fixture) error {
			c, _ := lease.NewClient(&unanswered{Backend: f.store, release: boom}, lease.ClientOptions{Owner: "test", Clock: f.clock})
			_, err := c.TryAcquire(ctx, "k", f.p)
			return err
		}, `lease: acquire "k": outcome unknown: reply lost (the clean-up release failed too: boom)`},
		{"Acquire waited until ctx ended", func(t *testing.T, f *fixture) error {
			f.acquire(t)
			cctx, cancel := context.WithCancelCause(ctx)
			done := make(chan error, 1)
			go func() { _, err := f.other(t).Acquire(cctx, "k", f.p); done <- err }()
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			defer wcancel()
			// Two attempts: f.b reports no releases, so the waiter asks
			// again after Retry (f.p's 1s, jittered shorter).
			if err := f.clock.WaitForTimers(wctx, 1); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(time.Second)
			if err := f.clock.WaitForTimers(wctx, 1); err != nil {
				t.Fatal(err)
			}
			cancel(errors.New("shutting down"))
			return <-done
		}, `lease: acquire "k": shutting down after 2 attempts; the last: held by "test" (token 1) for another 29s`},
		{"Renew", func(t *testing.T, f *fixture) error {
			h := f.acquire(t)
			f.b.failWith(boom)
			return h.Renew(ctx)
		}, `lease: renew "k": boom`},
		{"Renew lost", func(t *testing.T, f *fixture) error {
			h := f.acquire(t)
			f.b.failWith(&lease.LostError{Key: "k", Token: 1, Reason: lease.Expired})
			return h.Renew(ctx)
		}, `lease: renew "k": token 1 lost: expired`},
		{"Renew indeterminate", func(t *testing.T, f *fixture) error {
			h := f.acquire(t)
			f.b.failWith(lease.Indeterminate(context.DeadlineExceeded))
			return h.Renew(ctx)
		}, `lease: renew "k": outcome unknown: context deadline exceeded`},
		{"Renew after Release", func(t *testing.T, f *fixture) error {
			h := f.acquire(t)
			_ = h.Release(ctx)
			return h.Renew(ctx)
		}, `lease: renew "k": token 1 already released`},
		{"Release twice", func(t *testing.T, f *fixture) error {
			h := f.acquire(t)
			_ = h.Release(ctx)
			return h.Release(ctx)
		}, `lease: release "k": token 1 already released`},
		{"Release after takeover", func(t *testing.T, f *fixture) error {
			h := f.acquire(t)
			f.clock.Advance(31 * time.Second)
			if _, err := f.other(t).TryAcquire(ctx, "k", f.p); err != nil {
				t.Fatal(err)
			}
			return h.Release(ctx)
		}, `lease: release "k": token 1 lost: superseded`},
		{"Validate after expiry", func(t *testing.T, f *fixture) error {
			h := f.acquire(t)
			f.clock.Advance(31 * time.Second)
			return h.Validate(ctx)
		}, `lease: validate "k": token 1 lost: expired`},
		{"StartManaged twice", func(t *testing.T, f *fixture) error {
			h := f.acquire(t)
			m := manage(t, h, ctx)
			defer m.Stop(ctx)
			_, err := h.StartManaged(ctx)
			return err
		}, `lease: manage "k": already managed`},
		{"Managed loss after failed renewals", func(t *testing.T, f *fixture) error {
			h := f.acquire(t)
			f.b.failWith(boom)
			m := manage(t, h, ctx)
			defer m.Stop(ctx)
			for f.clock.Now().Before(h.Deadline()) {
				f.step(t, time.Second)
			}
			select {
			case <-m.Lost():
				return m.Err()
			case <-time.After(5 * time.Second):
				t.Fatal("not lost after the local deadline passed")
				return nil
			}
		}, `lease: renew "k": token 1 lost: local deadline passed: boom`},
		{"standalone NotAcquiredError", func(*testing.T, *fixture) error {
			return &lease.NotAcquiredError{Key: "k", Holder: "h", Token: 3, Remaining: 1500 * time.Millisecond}
		}, `lease: "k" is held by "h" (token 3) for another 1.5s`},
		{"standalone NotAcquiredError, holder unknown", func(*testing.T, *fixture) error { return &lease.NotAcquiredError{Key: "k"} },
			`lease: "k" is held by another acquisition`},
		{"standalone LostError", func(*testing.T, *fixture) error {
			return &lease.LostError{Key: "k", Token: 7, Reason: lease.Superseded}
		}, `lease: "k" token 7 lost: superseded`},
		{"Indeterminate", func(*testing.T, *fixture) error { return lease.Indeterminate(boom) }, `outcome unknown: boom`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			err := tc.err(t, f)
			if err == nil {
				t.Fatal("no error")
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("error reads\n\t%s\nwant\n\t%s", got, tc.want)
			}
		})
	}
}

// other returns a second client of f's backend, owner "other".
func (f *fixture) other(t *testing.T) *lease.Client {
	t.Helper()
	c, err := lease.NewClient(f.b, lease.ClientOptions{Owner: "other", Clock: f.clock, Observer: f.obs})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// unanswered reports every Acquire as unanswered, applying it first if
// apply is set, and fails every Release with release if set.
type unanswered struct {
	lease.Backend
	apply   bool
	release error
}

var errReplyLost = errors.New("reply lost")

func (u *unanswered) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	if u.apply {
		_, _ = u.Backend.Acquire(ctx, r)
	}
	return 0, lease.Indeterminate(errReplyLost)
}

func (u *unanswered) Release(ctx context.Context, a lease.Acquisition) error {
	if u.release != nil {
		return u.release
	}
	return u.Backend.Release(ctx, a)
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
		attrs []string // beyond key, level and message
	}{
		{&lease.Acquired{EventInfo: info, Attempts: 3, Waited: 2 * time.Second}, "lease acquired", slog.LevelInfo,
			[]string{"attempts=3", "waited=2s", "latency=1ms", "token=9", "owner=o"}},
		{&lease.AcquireFailed{EventInfo: failed, Attempts: 2, Waited: 250 * time.Millisecond}, "lease not acquired", slog.LevelWarn,
			[]string{"attempts=2", "waited=250ms", "latency=1ms", "error=boom"}},
		{&lease.AcquireFailed{EventInfo: lease.EventInfo{Key: "k", Err: lease.Indeterminate(context.Canceled)}, Attempts: 1}, "lease not acquired", slog.LevelWarn, nil},
		{&lease.AcquireFailed{EventInfo: lease.EventInfo{Key: "k", Err: &lease.NotAcquiredError{Key: "k"}}, Attempts: 1}, "lease not acquired", slog.LevelDebug, nil},
		{&lease.Renewed{EventInfo: info}, "lease renewed", slog.LevelDebug, nil},
		{&lease.RenewFailed{EventInfo: failed}, "lease renewal failed", slog.LevelWarn, nil},
		{&lease.Lost{EventInfo: failed}, "lease lost", slog.LevelError, nil},
		{&lease.Released{EventInfo: info}, "lease released", slog.LevelInfo, nil},
		{&lease.ReleaseFailed{EventInfo: failed}, "lease release failed", slog.LevelError, nil},
		{&lease.ReleaseFailed{EventInfo: lease.EventInfo{Key: "k", Err: &lease.LostError{Key: "k", Reason: lease.Expired}}}, "lease release failed", slog.LevelWarn, nil},
		{&lease.ReleaseFailed{EventInfo: lease.EventInfo{Key: "k", Err: lease.Indeterminate(errors.New("timeout"))}}, "lease release failed", slog.LevelError, nil},
		{&lease.AcquireFailed{EventInfo: lease.EventInfo{Key: "k", Err: context.Canceled}}, "lease not acquired", slog.LevelDebug, nil},
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
		for _, want := range append([]string{"level=" + tc.level.String(), `msg="` + tc.msg + `"`, "key=k"}, tc.attrs...) {
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
	other, _ := lease.NewClient(vague{f.b}, lease.ClientOptions{Owner: "other", Clock: f.clock, Observer: f.obs})
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

func TestAcquireWaitsByDefault(t *testing.T) {
	// With Wait and MaxAttempts zero, Acquire waits for the holder to
	// release, however long that takes, as sync.Mutex.Lock does.
	f := newFixture(t)
	holder := f.acquire(t)
	type result struct {
		h   *lease.Handle
		err error
	}
	done := make(chan result, 1)
	go func() { h, err := f.other(t).Acquire(context.Background(), "k", f.p); done <- result{h, err} }()
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 100 { // 100 pauses of at most Retry (1s): past any Wait a zero could have meant
		if err := f.clock.WaitForTimers(wctx, 1); err != nil {
			t.Fatal(i, err)
		}
		if i%10 == 0 {
			if err := holder.Renew(context.Background()); err != nil { // hold the key past its TTL
				t.Fatal(err)
			}
		}
		f.clock.Advance(time.Second)
	}
	select {
	case r := <-done:
		t.Fatalf("Acquire returned %v, %v while the key was held; want it to wait", r.h, r.err)
	default:
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	var r result
	for r.h == nil && r.err == nil {
		select {
		case r = <-done:
		case <-time.After(10 * time.Millisecond):
			f.clock.Advance(time.Second)
		}
	}
	if r.err != nil {
		t.Fatalf("waiting Acquire: %v", r.err)
	}
	if r.h.Token() <= holder.Token() {
		t.Fatalf("token %d, want above %d", r.h.Token(), holder.Token())
	}
}

// slowAcquire advances the fake clock by d inside every Acquire, as a
// backend round trip would take time.
type slowAcquire struct {
	lease.Backend
	clock *leasetest.FakeClock
	d     time.Duration
}

func (s *slowAcquire) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	s.clock.Advance(s.d)
	return s.Backend.Acquire(ctx, r)
}

// TestAcquireEvents checks the figures that metrics are built from:
// Latency is the one backend call the event reports, never the waiting;
// Attempts counts backend attempts; Waited runs from the call to the event.
func TestAcquireEvents(t *testing.T) {
	f := newFixture(t)
	holder := f.acquire(t)
	const call = 7 * time.Millisecond
	slow := &slowAcquire{Backend: vague{f.store}, clock: f.clock, d: call}
	obs := &recorder{}
	c, err := lease.NewClient(slow, lease.ClientOptions{Owner: "other", Clock: f.clock, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Retry: time.Second, MaxAttempts: 4})
	if err != nil {
		t.Fatal(err)
	}
	start := f.clock.Now()
	done := make(chan error, 1)
	go func() { _, err := c.Acquire(context.Background(), "k", p); done <- err }()
	if err := f.await(t, done); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("Acquire = %v, want ErrNotAcquired", err)
	}
	failed := obs.lastAcquireFailed()
	if failed == nil {
		t.Fatal("no AcquireFailed event")
	}
	if failed.Attempts != 4 || failed.Latency != call || failed.Waited > f.clock.Now().Sub(start) || failed.Waited < 4*call+3*(800*time.Millisecond) {
		t.Fatalf("AcquireFailed{Attempts: %d, Latency: %v, Waited: %v}; want 4 attempts, Latency %v (one call), Waited from the call to the event (4 calls and 3 pauses, at most %v)",
			failed.Attempts, failed.Latency, failed.Waited, call, f.clock.Now().Sub(start))
	}

	// Acquired after waiting: the same figures on success.
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, err := c.TryAcquire(context.Background(), "k", p)
	if err != nil {
		t.Fatal(err)
	}
	var got *lease.Acquired
	obs.mu.Lock()
	for _, e := range obs.events {
		if e, ok := e.(*lease.Acquired); ok {
			got = e
		}
	}
	obs.mu.Unlock()
	if got == nil || got.Attempts != 1 || got.Latency != call || got.Waited != call || got.Token == 0 {
		t.Fatalf("Acquired event %+v, want 1 attempt, Latency = Waited = %v, a token", got, call)
	}
	// Remaining runs to the local deadline: the local lifetime from the
	// request's send time.
	if want := p.LocalLifetime() - call; got.Remaining != want || h.Deadline().Sub(f.clock.Now()) != want {
		t.Fatalf("Acquired.Remaining = %v, want %v (Deadline in %v)", got.Remaining, want, h.Deadline().Sub(f.clock.Now()))
	}
	f.clock.Advance(10 * time.Second)
	if err := h.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	var renewed *lease.Renewed
	obs.mu.Lock()
	for _, e := range obs.events {
		if e, ok := e.(*lease.Renewed); ok {
			renewed = e
		}
	}
	obs.mu.Unlock()
	if renewed == nil || renewed.Remaining != p.LocalLifetime() {
		t.Fatalf("Renewed event %+v, want Remaining %v: the renewal moved the deadline", renewed, p.LocalLifetime())
	}
}

// firstUnanswered reports the first Acquire as unanswered without applying
// it, and passes the others on.
type firstUnanswered struct {
	lease.Backend
	n atomic.Int64
}

func (b *firstUnanswered) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	if b.n.Add(1) == 1 {
		return 0, lease.Indeterminate(errReplyLost)
	}
	return b.Backend.Acquire(ctx, r)
}

func TestAcquireStaysIndeterminateAfterAnsweredAttempts(t *testing.T) {
	// One unanswered attempt, then attempts the backend answered (the key
	// is held): the later answers say nothing about the first attempt,
	// which may still be granted when the holder lets go.
	f := newFixture(t)
	f.acquire(t)
	b := &firstUnanswered{Backend: vague{f.store}}
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "other", Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Retry: time.Second, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Acquire(context.Background(), "k", p); done <- err }()
	err = f.await(t, done)
	if !errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("Acquire = %v, want ErrIndeterminate and ErrNotAcquired (the last answer)", err)
	}
	if n := b.n.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
}

func TestGrantAfterCancelStaysIndeterminateAfterAnUnansweredAttempt(t *testing.T) {
	// The first attempt goes unanswered, the second is granted after the
	// caller gave up: giving that grant back does not settle the first.
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	b := &cancelOnGrant{firstUnanswered: firstUnanswered{Backend: f.store}, cancel: cancel}
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "other", Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Acquire(ctx, "k", f.p); done <- err }()
	err = f.await(t, done)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, lease.ErrIndeterminate) {
		t.Fatalf("Acquire = %v, want context.Canceled and ErrIndeterminate", err)
	}
	if r, err := f.c.Inspect(context.Background(), "k"); err != nil || r.Held {
		t.Fatalf("Inspect = %+v, %v; want the grant given back", r, err)
	}
}

type cancelOnGrant struct {
	firstUnanswered
	cancel context.CancelFunc
}

func (b *cancelOnGrant) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	tok, err := b.firstUnanswered.Acquire(ctx, r)
	if err == nil {
		b.cancel()
	}
	return tok, err
}

func TestAcquireWaitShorterThanHolder(t *testing.T) {
	// The holder keeps the key for 30s, past Wait (5s). With release
	// notifications, Acquire sleeps until Wait runs out and gives up after
	// one attempt, unless a release wakes it; without them, asking is the
	// only way to see a release, so it asks every Retry until Wait runs
	// out.
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("watcher, no release", func(t *testing.T) {
		f := newFixture(t)
		f.acquire(t)
		c, _ := lease.NewClient(f.store, lease.ClientOptions{Owner: "other", Clock: f.clock, Observer: f.obs})
		done := make(chan error, 1)
		go func() { _, err := c.Acquire(context.Background(), "k", p); done <- err }()
		if err := f.await(t, done); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("Acquire = %v, want ErrNotAcquired", err)
		}
		if elapsed := f.clock.Now().Sub(epoch); elapsed < 5*time.Second || elapsed > 5*time.Second+100*time.Millisecond {
			t.Fatalf("gave up after %v of fake time, want at Wait (5s)", elapsed)
		}
		if failed := f.obs.lastAcquireFailed(); failed == nil || failed.Attempts != 1 {
			t.Fatalf("AcquireFailed event %+v, want 1 attempt", failed)
		}
	})
	t.Run("watcher, released", func(t *testing.T) {
		f := newFixture(t)
		h := f.acquire(t)
		c, _ := lease.NewClient(f.store, lease.ClientOptions{Owner: "other", Clock: f.clock})
		done := make(chan error, 1)
		go func() { _, err := c.Acquire(context.Background(), "k", p); done <- err }()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := f.clock.WaitForTimers(ctx, 1); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(2 * time.Second)
		if err := h.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		wantGranted(t, done, "after the release", "the release did not wake the waiter")
	})
	t.Run("no watcher", func(t *testing.T) {
		f := newFixture(t)
		f.acquire(t)
		c, _ := lease.NewClient(f.b, lease.ClientOptions{Owner: "other", Clock: f.clock, Observer: f.obs})
		done := make(chan error, 1)
		go func() { _, err := c.Acquire(context.Background(), "k", p); done <- err }()
		if err := f.await(t, done); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("Acquire = %v, want ErrNotAcquired", err)
		}
		if elapsed := f.clock.Now().Sub(epoch); elapsed < 4*time.Second || elapsed > 5*time.Second+100*time.Millisecond {
			t.Fatalf("gave up after %v of fake time, want near Wait (5s)", elapsed)
		}
		// Retry is 100ms: about one attempt per Retry over the 5s.
		if failed := f.obs.lastAcquireFailed(); failed == nil || failed.Attempts < 30 {
			t.Fatalf("AcquireFailed event %+v, want an attempt about every Retry (100ms) over Wait (5s)", failed)
		}
	})
}

func TestAcquirePollOnlyAfterRenewal(t *testing.T) {
	// Poll (default TTL) is the least pause only once the waiter saw the
	// holder renew: a holder about to expire, seen once, is taken over
	// at its expiry, not a Poll later.
	f := newFixture(t)
	f.acquire(t) // 30s, never renewed
	f.clock.Advance(29900 * time.Millisecond)
	c, _ := lease.NewClient(f.store, lease.ClientOptions{Owner: "other", Clock: f.clock, Observer: f.obs})
	done := make(chan error, 1)
	go func() { _, err := c.Acquire(context.Background(), "k", f.p); done <- err }()
	if err := f.await(t, done); err != nil {
		t.Fatalf("Acquire = %v, want the key after the holder expired", err)
	}
	if waited := f.clock.Now().Sub(epoch) - 29900*time.Millisecond; waited > 500*time.Millisecond {
		t.Fatalf("took the key %v after the holder had 100ms left, want within the holder's time and a fifth of Retry", waited)
	}
}

// failingWatch fails its first fail release-watch setups.
type failingWatch struct {
	*memory.Store
	fail    int64
	watches atomic.Int64
}

func (b *failingWatch) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if b.watches.Add(1) <= b.fail {
		return nil, nil, errors.New("connection refused")
	}
	return b.Store.WatchReleases(ctx, key)
}

func TestAcquireSetsUpAFailedWatchAgainAfterPoll(t *testing.T) {
	// The first watch fails: the waiter polls every Retry (1s), and sets
	// up a watch again once Poll (5s) has passed, not before every attempt
	// and not never; then it is quiet, and the release wakes it.
	f := newFixture(t)
	holder := f.acquire(t) // 30s, never renewed
	b := &failingWatch{Store: f.store, fail: 1}
	c, _ := lease.NewClient(b, lease.ClientOptions{Owner: "other", Clock: f.clock})
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Retry: time.Second, Poll: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Acquire(context.Background(), "k", p); done <- err }()
	for f.clock.Now().Sub(epoch) < 10*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := f.clock.WaitForTimers(ctx, 1); err != nil {
			t.Fatalf("the waiter did not sleep: %v", err)
		}
		cancel()
		f.clock.Advance(100 * time.Millisecond)
	}
	if n := b.watches.Load(); n != 2 {
		t.Fatalf("%d watch setups in 10s after a failed one, want 2 (the failed one, and one more after Poll)", n)
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantGranted(t, done, "after the release", "the release did not wake the waiter: its second watch does not work")
}

// forgetful is a backend that, once told to, shows every key without a
// record, as a backend that lost its data does.
type forgetful struct {
	lease.Backend
	forgot atomic.Bool
}

func (f *forgetful) Inspect(ctx context.Context, key string) (lease.Record, error) {
	if f.forgot.Load() {
		return lease.Record{Key: key}, nil
	}
	return f.Backend.Inspect(ctx, key)
}

// TestValidateReportsLostRecord: Validate of a handle whose key the
// backend no longer has a record of reports RecordLost, not Expired.
func TestValidateReportsLostRecord(t *testing.T) {
	ctx := context.Background()
	b := &forgetful{Backend: memory.New(memory.Options{})}
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute})
	h, err := c.TryAcquire(ctx, "k", p)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Validate(ctx); err != nil {
		t.Fatalf("Validate of a held lease: %v", err)
	}
	b.forgot.Store(true)
	err = h.Validate(ctx)
	var le *lease.LostError
	if !errors.As(err, &le) || le.Reason != lease.RecordLost {
		t.Fatalf("Validate after the record was lost = %v, want a *LostError with reason RecordLost", err)
	}
	if want := `lease: validate "k": token 1 lost: record lost`; err.Error() != want {
		t.Fatalf("error text %q, want %q", err, want)
	}
}

// misconfigured is a backend whose every Acquire is refused for a reason
// no retry cures, as a missing table is.
type misconfigured struct {
	lease.Backend
	n atomic.Int32
}

var errNoTable = errors.New(`backend: relation "leases" does not exist`)

func (m *misconfigured) Acquire(context.Context, lease.AcquireRequest) (lease.Token, error) {
	m.n.Add(1)
	return 0, lease.Misconfigured(errNoTable)
}

// TestAcquireStopsAtMisconfigured: a refusal that no retry cures ends
// Acquire's wait at its first attempt, with the error TryAcquire gives,
// however long the wait would have been.
func TestAcquireStopsAtMisconfigured(t *testing.T) {
	f := newFixture(t)
	b := &misconfigured{Backend: f.store}
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "other", Clock: f.clock, Observer: f.obs})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Retry: time.Second, Wait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	_, tryErr := c.TryAcquire(context.Background(), "k", p)
	done := make(chan error, 1)
	go func() { _, err := c.Acquire(context.Background(), "k", p); done <- err }()
	// The fake clock never moves: an Acquire that waits never returns.
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire still waits after a misconfigured refusal")
	}
	if !errors.Is(err, lease.ErrMisconfigured) || !errors.Is(err, errNoTable) || errors.Is(err, lease.ErrIndeterminate) {
		t.Fatalf("Acquire = %v, want ErrMisconfigured wrapping the backend's error", err)
	}
	if err.Error() != tryErr.Error() {
		t.Fatalf("Acquire = %q, want TryAcquire's error %q", err, tryErr)
	}
	if n := b.n.Load(); n != 2 {
		t.Fatalf("%d attempts (TryAcquire's and Acquire's), want 2", n)
	}
	if failed := f.obs.lastAcquireFailed(); failed == nil || failed.Attempts != 1 {
		t.Fatalf("AcquireFailed event %+v, want 1 attempt", failed)
	}
}

func TestMisconfigured(t *testing.T) {
	err := lease.Misconfigured(errNoTable)
	if !errors.Is(err, lease.ErrMisconfigured) || !errors.Is(err, errNoTable) || err.Error() != errNoTable.Error() {
		t.Fatalf("Misconfigured(%v) = %v, want it to match both with the same text", errNoTable, err)
	}
	if lease.Misconfigured(nil) != nil {
		t.Fatal("Misconfigured(nil) != nil")
	}
	if lease.Misconfigured(err) != err {
		t.Fatal("Misconfigured wrapped twice")
	}
	if u := lease.Indeterminate(errNoTable); lease.Misconfigured(u) != u {
		t.Fatal("Misconfigured marked an indeterminate error")
	}
}
