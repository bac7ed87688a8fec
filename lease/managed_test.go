package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// faulty wraps a backend and, while fail is set, fails renewals with it.
type faulty struct {
	lease.Backend
	fail   atomic.Pointer[error]
	renews atomic.Int64
}

func (f *faulty) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	f.renews.Add(1)
	if p := f.fail.Load(); p != nil {
		return *p
	}
	return f.Backend.Renew(ctx, a, ttl)
}

func (f *faulty) failWith(err error) { f.fail.Store(&err) }

// vague is a backend that names the holder of a held key but not its
// remaining time, so that Acquire waits for it every Retry: the tests of
// Wait and MaxAttempts use it to count attempts.
type vague struct{ lease.Backend }

func (v vague) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	tok, err := v.Backend.Acquire(ctx, r)
	if na, ok := err.(*lease.NotAcquiredError); ok {
		na.Remaining = 0
	}
	return tok, err
}

// recorder collects observed events.
type recorder struct {
	mu     sync.Mutex
	events []lease.Event
}

func (r *recorder) Observe(e lease.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) count(match func(lease.Event) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if match(e) {
			n++
		}
	}
	return n
}

func isLost(e lease.Event) bool    { _, ok := e.(*lease.Lost); return ok }
func isRenewed(e lease.Event) bool { _, ok := e.(*lease.Renewed); return ok }

type fixture struct {
	clock *leasetest.FakeClock
	store *memory.Store
	b     *faulty
	obs   *recorder
	c     *lease.Client
	p     lease.Policy
}

// newFixture returns a client on a memory backend sharing one fake clock,
// with TTL 30s, RenewEvery 10s, SafetyMargin 5s, Retry 1s.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{clock: leasetest.NewFakeClock(epoch), obs: &recorder{}}
	f.store = memory.New(memory.Options{Clock: f.clock})
	f.b = &faulty{Backend: f.store}
	var err error
	f.c, err = lease.NewClient(f.b, lease.ClientOptions{Owner: "test", Clock: f.clock, Observer: f.obs})
	if err != nil {
		t.Fatal(err)
	}
	f.p, err = lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, RenewEvery: 10 * time.Second, SafetyMargin: 5 * time.Second, Retry: time.Second, OperationTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) acquire(t *testing.T) *lease.Handle {
	t.Helper()
	h, err := f.c.Acquire(context.Background(), "k", f.p)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// step waits for the renewer to sleep, then advances the clock by d.
func (f *fixture) step(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.clock.WaitForTimers(ctx, 1); err != nil {
		t.Fatalf("the renewer never went to sleep: %v", err)
	}
	f.clock.Advance(d)
}

func TestManagedRenewsOnCadence(t *testing.T) {
	f := newFixture(t)
	h := f.acquire(t)
	m := manage(t, h, context.Background())
	defer m.Stop(context.Background())
	// RenewEvery 10s, shortened by at most 20% jitter: in 100s there are
	// between 10 and 12 renewals.
	for range 100 {
		f.step(t, time.Second)
	}
	f.step(t, 0) // let the last renewal finish
	n := f.obs.count(isRenewed)
	if n < 10 || n > 12 {
		t.Fatalf("%d renewals in 100s with RenewEvery 10s, want 10 to 12", n)
	}
	if got, want := h.Deadline(), f.clock.Now().Add(h.Policy().LocalLifetime()); got.After(want) || got.Before(want.Add(-10*time.Second)) {
		t.Fatalf("deadline %v, want within 10s before %v", got, want)
	}
	r, _ := f.store.Inspect(context.Background(), "k")
	if !r.Held || r.Token != h.Token() {
		t.Fatalf("lease not held after 100s of managed renewal: %+v", r)
	}
}

func TestManagedRetriesTransientErrorsThenLosesAtDeadline(t *testing.T) {
	f := newFixture(t)
	h := f.acquire(t)
	deadline := h.Deadline() // epoch + 25s
	m := manage(t, h, context.Background())
	defer m.Stop(context.Background())
	transient := errors.New("connection refused")
	f.b.failWith(transient)
	for f.clock.Now().Before(deadline) {
		select {
		case <-m.Lost():
			t.Fatalf("lost at %v, before the local deadline %v", f.clock.Now().Sub(epoch), deadline.Sub(epoch))
		default:
		}
		f.step(t, 500*time.Millisecond)
	}
	select {
	case <-m.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("not lost after the local deadline passed")
	}
	if n := f.b.renews.Load(); n < 10 {
		t.Fatalf("%d renewal attempts between RenewEvery and the deadline with Retry 1s, want at least 10", n)
	}
	var le *lease.LostError
	if err := m.Err(); !errors.As(err, &le) || le.Reason != lease.DeadlinePassed || !errors.Is(err, transient) {
		t.Fatalf("Err() = %v, want a *LostError (local deadline passed) wrapping the transient error", err)
	}
	if cause := context.Cause(m.Context()); !errors.Is(cause, lease.ErrLost) {
		t.Fatalf("Context cause = %v, want ErrLost", cause)
	}
	if n := f.obs.count(isLost); n != 1 {
		t.Fatalf("%d Lost events, want 1", n)
	}
	if err := m.Stop(context.Background()); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Stop after loss = %v, want the loss", err)
	}
}

func TestManagedRecoversFromTransientErrors(t *testing.T) {
	f := newFixture(t)
	h := f.acquire(t)
	m := manage(t, h, context.Background())
	defer m.Stop(context.Background())
	f.b.failWith(errors.New("timeout"))
	for range 14 { // 14s: the first renewal at 8–10s fails, retries follow
		f.step(t, time.Second)
	}
	f.b.fail.Store(nil)
	for range 5 {
		f.step(t, time.Second)
	}
	f.step(t, 0)
	select {
	case <-m.Lost():
		t.Fatalf("lost: %v", m.Err())
	default:
	}
	if want := epoch.Add(14 * time.Second).Add(h.Policy().LocalLifetime()); h.Deadline().Before(want) {
		t.Fatalf("deadline %v not extended past %v by the recovered renewal", h.Deadline(), want)
	}
}

func TestManagedLosesAtOnceWhenBackendSaysLost(t *testing.T) {
	f := newFixture(t)
	h := f.acquire(t)
	m := manage(t, h, context.Background())
	defer m.Stop(context.Background())
	f.b.failWith(&lease.LostError{Key: "k", Token: h.Token(), Reason: lease.Superseded})
	f.step(t, 10*time.Second) // the first renewal
	select {
	case <-m.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("not lost although the backend said so")
	}
	if n := f.b.renews.Load(); n != 1 {
		t.Fatalf("%d renewal attempts, want 1: a loss is not retried", n)
	}
	if f.clock.Now().After(h.Deadline()) {
		t.Fatal("test broken: the deadline passed")
	}
	var le *lease.LostError
	if !errors.As(m.Err(), &le) || le.Reason != lease.Superseded {
		t.Fatalf("Err() = %v, want superseded", m.Err())
	}
}

func TestManagedStop(t *testing.T) {
	f := newFixture(t)
	h := f.acquire(t)
	m := manage(t, h, context.Background())
	if m2, err := h.StartManaged(context.Background()); m2 != nil || !errors.Is(err, lease.ErrAlreadyManaged) {
		t.Fatalf("a second StartManaged = %v, %v; want nil, ErrAlreadyManaged", m2, err)
	}
	f.step(t, 10*time.Second)
	if err := m.Stop(context.Background()); err != nil {
		t.Fatalf("Stop = %v, want nil", err)
	}
	if err := m.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop = %v, want nil", err)
	}
	if cause := context.Cause(m.Context()); !errors.Is(cause, lease.ErrStopped) {
		t.Fatalf("Context cause after Stop = %v, want ErrStopped", cause)
	}
	select {
	case <-m.Lost():
		t.Fatal("Lost closed by Stop")
	default:
	}
	// Stop does not release.
	if err := h.Validate(context.Background()); err != nil {
		t.Fatalf("Validate after Stop = %v; Stop must not release", err)
	}
	if n := f.obs.count(isLost); n != 0 {
		t.Fatalf("%d Lost events after Stop, want 0", n)
	}
}

func TestManagedReleaseBeforeAndAfterStop(t *testing.T) {
	for _, releaseFirst := range []bool{true, false} {
		f := newFixture(t)
		h := f.acquire(t)
		m := manage(t, h, context.Background())
		f.step(t, 10*time.Second)
		ctx := context.Background()
		var relErr, stopErr error
		if releaseFirst { // defer m.Stop; defer h.Release — as in the README
			relErr = h.Release(ctx)
			stopErr = m.Stop(ctx)
		} else {
			stopErr = m.Stop(ctx)
			relErr = h.Release(ctx)
		}
		if relErr != nil || stopErr != nil {
			t.Fatalf("releaseFirst=%v: Release = %v, Stop = %v; want nil, nil", releaseFirst, relErr, stopErr)
		}
		if n := f.obs.count(isLost); n != 0 {
			t.Fatalf("releaseFirst=%v: %d Lost events, want 0", releaseFirst, n)
		}
		if r, _ := f.store.Inspect(ctx, "k"); r.Held {
			t.Fatalf("releaseFirst=%v: still held after Release", releaseFirst)
		}
		want := lease.ErrStopped
		if releaseFirst {
			want = lease.ErrReleased
		}
		if cause := context.Cause(m.Context()); !errors.Is(cause, want) {
			t.Fatalf("releaseFirst=%v: Context cause = %v, want %v", releaseFirst, cause, want)
		}
	}
}

func TestManagedStopsWithParentContext(t *testing.T) {
	f := newFixture(t)
	h := f.acquire(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	m := manage(t, h, ctx)
	cause := errors.New("shutting down")
	cancel(cause)
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("renewer still running after its context ended")
	}
	if got := context.Cause(m.Context()); got != cause {
		t.Fatalf("Context cause = %v, want %v", got, cause)
	}
	if m.Err() != nil {
		t.Fatalf("Err() = %v after the parent ended, want nil", m.Err())
	}
}

// manage starts managed renewal of h, failing the test on error.
func manage(t *testing.T, h *lease.Handle, ctx context.Context) *lease.Managed {
	t.Helper()
	m, err := h.StartManaged(ctx)
	if err != nil {
		t.Fatalf("StartManaged: %v", err)
	}
	return m
}

// TestStartManagedErrors checks each refusal of StartManaged: what it
// matches, and its exact text.
func TestStartManagedErrors(t *testing.T) {
	ctx := context.Background()
	shutdown := errors.New("shutting down")
	for _, tc := range []struct {
		name    string
		prepare func(f *fixture, h *lease.Handle) context.Context
		is      []error
		reason  lease.LostReason // of the *LostError, if any
		text    string
	}{
		{"released", func(f *fixture, h *lease.Handle) context.Context {
			_ = h.Release(ctx)
			return ctx
		}, []error{lease.ErrLost, lease.ErrReleased}, lease.Expired, `lease: manage "k": token 1 already released`},
		{"known lost", func(f *fixture, h *lease.Handle) context.Context {
			f.b.failWith(&lease.LostError{Key: "k", Token: 1, Reason: lease.Superseded})
			_ = h.Renew(ctx)
			f.b.fail.Store(nil)
			return ctx
		}, []error{lease.ErrLost}, lease.Superseded, `lease: manage "k": token 1 lost: superseded`},
		{"local deadline passed", func(f *fixture, h *lease.Handle) context.Context {
			f.clock.Advance(25 * time.Second)
			return ctx
		}, []error{lease.ErrLost}, lease.DeadlinePassed, `lease: manage "k": token 1 lost: local deadline passed`},
		{"already managed", func(f *fixture, h *lease.Handle) context.Context {
			m := manage(t, h, ctx)
			_ = m.Stop(ctx)
			return ctx
		}, []error{lease.ErrAlreadyManaged}, 0, `lease: manage "k": already managed`},
		{"context done", func(f *fixture, h *lease.Handle) context.Context {
			cctx, cancel := context.WithCancelCause(ctx)
			cancel(shutdown)
			return cctx
		}, []error{shutdown}, 0, `lease: manage "k": shutting down`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			h := f.acquire(t)
			m, err := h.StartManaged(tc.prepare(f, h))
			if m != nil || err == nil {
				t.Fatalf("StartManaged = %v, %v; want nil and an error", m, err)
			}
			for _, target := range tc.is {
				if !errors.Is(err, target) {
					t.Errorf("StartManaged = %v, which does not match %v", err, target)
				}
			}
			var lost *lease.LostError
			if got := errors.As(err, &lost); got != (tc.reason != 0) || got && lost.Reason != tc.reason {
				t.Errorf("StartManaged = %v: *LostError %v, want reason %v", err, lost, tc.reason)
			}
			if err.Error() != tc.text {
				t.Errorf("StartManaged error reads %q, want %q", err, tc.text)
			}
		})
	}
}

func TestManagedClockJumpPastDeadline(t *testing.T) {
	// A client clock that jumps forward past the local deadline (a
	// suspended VM) must lose the lease, never act on it.
	f := newFixture(t)
	h := f.acquire(t)
	m := manage(t, h, context.Background())
	defer m.Stop(context.Background())
	f.step(t, time.Hour)
	select {
	case <-m.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("not lost after the clock jumped past the deadline")
	}
	var le *lease.LostError
	if !errors.As(m.Err(), &le) || le.Reason != lease.DeadlinePassed {
		t.Fatalf("Err() = %v, want local deadline passed", m.Err())
	}
	if n := f.b.renews.Load(); n != 0 {
		t.Fatalf("%d renewals attempted after the deadline, want 0", n)
	}
}

// offsetClock reads the system clock plus an offset, and its timers run on
// real time: moving the offset moves Now without firing any timer, as a
// process sees the time when it runs again after being paused.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *offsetClock) NewTimer(d time.Duration) lease.Timer {
	return lease.SystemClock().NewTimer(d)
}

func TestManagedStopAfterUnnoticedDeadline(t *testing.T) {
	// The process was paused past the local deadline and, on resuming,
	// stops the renewer before the renewer has run: the lease was lost
	// before Stop, so Stop must say so, as the renewer would have.
	clock := &offsetClock{}
	obs := &recorder{}
	c, err := lease.NewClient(memory.New(memory.Options{Clock: clock}), lease.ClientOptions{Owner: "test", Clock: clock, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := c.Acquire(ctx, "k", p)
	if err != nil {
		t.Fatal(err)
	}
	m := manage(t, h, ctx)
	clock.offset.Store(int64(2 * time.Hour)) // no timer fires: the renewer sleeps on
	err = m.Stop(ctx)
	var le *lease.LostError
	if !errors.As(err, &le) || le.Reason != lease.DeadlinePassed {
		t.Fatalf("Stop = %v, want the local deadline passed", err)
	}
	if m.Err() != err {
		t.Fatalf("Err() = %v, want %v", m.Err(), err)
	}
	select {
	case <-m.Lost():
	default:
		t.Fatal("Lost not closed")
	}
	if n := obs.count(isLost); n != 1 {
		t.Fatalf("%d Lost events, want 1", n)
	}
	if err2 := m.Stop(ctx); err2 != err {
		t.Fatalf("second Stop = %v, want %v", err2, err)
	}
	if !errors.Is(context.Cause(m.Context()), lease.ErrStopped) {
		t.Fatalf("Context cause = %v, want ErrStopped", context.Cause(m.Context()))
	}
}

func TestManagedParentEndsAfterUnnoticedDeadline(t *testing.T) {
	// The same pause, but the renewer stops because the context given to
	// StartManaged ended (the program was shutting down when it resumed).
	// The deadline had passed by then: that is a loss too.
	clock := &offsetClock{}
	c, err := lease.NewClient(memory.New(memory.Options{Clock: clock}), lease.ClientOptions{Owner: "test", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Acquire(context.Background(), "k", p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := manage(t, h, ctx)
	clock.offset.Store(int64(2 * time.Hour))
	cancel()
	<-m.Done()
	var le *lease.LostError
	if !errors.As(m.Err(), &le) || le.Reason != lease.DeadlinePassed {
		t.Fatalf("Err() = %v, want the local deadline passed", m.Err())
	}
	// Released after the deadline: not reported as a loss by the renewer.
	h2, err := c.Acquire(context.Background(), "k2", p)
	if err != nil {
		t.Fatal(err)
	}
	m2 := manage(t, h2, context.Background())
	clock.offset.Store(int64(4 * time.Hour))
	_ = h2.Release(context.Background())
	<-m2.Done()
	if m2.Err() != nil {
		t.Fatalf("Err() after Release = %v, want nil", m2.Err())
	}
}

// timeoutAfter fails renewals with a refusal, then, once told, with a
// timeout, as a last attempt cut short at the local deadline does.
type timeoutAfter struct {
	lease.Backend
	timeouts atomic.Bool
}

var errRefused = errors.New("NOPERM this user has no permissions to run the 'evalsha' command")

func (b *timeoutAfter) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	if b.timeouts.Load() {
		return lease.Indeterminate(context.DeadlineExceeded)
	}
	return errRefused
}

func TestManagedLossKeepsTheTellingError(t *testing.T) {
	f := newFixture(t)
	b := &timeoutAfter{Backend: f.store}
	c, _ := lease.NewClient(b, lease.ClientOptions{Owner: "test", Clock: f.clock})
	h, err := c.Acquire(context.Background(), "k", f.p)
	if err != nil {
		t.Fatal(err)
	}
	m := manage(t, h, context.Background())
	defer m.Stop(context.Background())
	for range 15 { // refused renewals from 8–10s on
		f.step(t, time.Second)
	}
	b.timeouts.Store(true)
	for i := 0; ; i++ {
		// Wait until the renewer sleeps again or has given up.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		waited := make(chan error, 1)
		go func() { waited <- f.clock.WaitForTimers(ctx, 1) }()
		select {
		case <-m.Lost():
			cancel()
			<-waited
		case err := <-waited:
			cancel()
			if err != nil {
				t.Fatal("the renewer neither slept nor gave up")
			}
			f.clock.Advance(time.Second)
			if i > 30 {
				t.Fatal("not lost 30s after the refusals began")
			}
			continue
		}
		break
	}
	if err := m.Err(); !errors.Is(err, errRefused) {
		t.Fatalf("Err() = %v, want it to carry the refusal, not only the final timeout", err)
	}
}
