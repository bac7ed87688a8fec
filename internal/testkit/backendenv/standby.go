package backendenv

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

// A Contender starts the waiter under test: it campaigns with c for key
// under p until ctx ends and calls elected when it holds the lease. It
// returns a health check to call while it waits (nil if it has none) and
// a channel that receives its result once it has stopped.
type Contender func(ctx context.Context, c *lease.Client, key string, p lease.Policy, elected func()) (check func() error, done <-chan error)

// A Waiter is a contender that a Start began.
type Waiter struct {
	// Calls returns how many Acquire calls the contender made so far:
	// counted as they are made if Live, else from events, which arrive
	// when a Client.Acquire returns, complete once Done delivered.
	Calls func() int64
	Live  bool
	// Watches returns how many release watches the contender set up, if
	// Live.
	Watches func() int64
	// Elected is closed when the contender holds the lease.
	Elected <-chan struct{}
	// Check is the contender's health check, or nil.
	Check func() error
	// Done receives the contender's result once ctx ended.
	Done <-chan error
}

// A Start begins a contender for key under p, on the Standby's clock,
// running until ctx ends.
type Start func(ctx context.Context, key string, p lease.Policy) Waiter

// Standby is where a contender waits for a key that a holder holds: the
// holder's backend, the contender's (on a connection of its own), and the
// contender's clock, a FakeClock that only the test moves, so that what
// the contender does is counted in calls, never judged by time. On a real
// server the leases expire on the server's clock, so the holder keeps the
// key a real minute while the test moves the contender's clock through
// several TTLs.
type Standby struct {
	Holder, Contender lease.Backend
	Clock             *leasetest.FakeClock
	// SetupWakes is how often the backend may wake a new release watch
	// without a release, by design, while the watch is set up (see
	// Env.SetupWakes); each such wake costs the contender one call.
	SetupWakes int
}

// StandbyTTL is the TTL of the holder's lease and of the contender's
// policy: long enough that real time, which the holder's lease expires
// on, never runs it out during a test. A contender whose policy is not
// the one CountIdle gives it must use this TTL and default Poll.
const StandbyTTL = time.Minute

// MemoryStandby returns a Standby on one memory backend, whose expiry runs
// on the contender's FakeClock.
func MemoryStandby() Standby {
	clock := NewClock()
	mem := leasememory.New(leasememory.Options{Clock: clock})
	return Standby{Holder: mem, Contender: mem, Clock: clock}
}

// Standby returns a Standby on e's server, each side on a backend of its
// own.
func (e *Env) Standby(t testing.TB) Standby {
	return Standby{Holder: e.NewBackend(t, e.Addr), Contender: e.NewBackend(t, e.Addr), Clock: NewClock(), SetupWakes: e.SetupWakes}
}

// PollingStandby is Standby with a contender's backend without release
// notifications (NewPollingBackend); nil if e has none.
func (e *Env) PollingStandby(t testing.TB) *Standby {
	if e.NewPollingBackend == nil {
		return nil
	}
	return &Standby{Holder: e.NewBackend(t, e.Addr), Contender: e.NewPollingBackend(t, e.Addr), Clock: NewClock()}
}

// NewClock returns a FakeClock for a Standby's contender.
func NewClock() *leasetest.FakeClock {
	return leasetest.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
}

// holder holds key on s.Holder directly, as another replica would.
type holder struct {
	b lease.Backend
	a lease.Acquisition
}

func (s Standby) hold(t testing.TB, ctx context.Context, key string) *holder {
	t.Helper()
	r := lease.AcquireRequest{Key: key, Owner: "holder", Nonce: rand.Text(), TTL: StandbyTTL}
	tok, err := s.Holder.Acquire(ctx, r)
	if err != nil {
		t.Fatalf("the holder's Acquire: %v", err)
	}
	return &holder{b: s.Holder, a: lease.Acquisition{Key: key, Owner: r.Owner, Nonce: r.Nonce, Token: tok}}
}

// On returns a Start that runs the contender with a client of its own on
// s.Contender and s.Clock, whose calls leasetest.CountCalls counts as
// they are made.
func (s Standby) On(run Contender) Start {
	return func(ctx context.Context, key string, p lease.Policy) Waiter {
		b, calls := leasetest.CountCalls(s.Contender)
		w := Waiter{Calls: calls.Acquire.Load, Live: true, Watches: calls.WatchReleases.Load}
		c, err := lease.NewClient(b, lease.ClientOptions{Owner: "contender", Clock: s.Clock})
		if err != nil {
			done := make(chan error, 1)
			done <- err
			w.Done = done
			return w
		}
		elected := make(chan struct{})
		w.Elected = elected
		w.Check, w.Done = run(ctx, c, key, p, sync.OnceFunc(func() { close(elected) }))
		return w
	}
}

// standbyRounds is how many TTLs CountIdle counts over after the first.
const standbyRounds = 5

// CountIdle checks that a contender waiting for a key whose holder keeps
// renewing is quiet: over 1+standbyRounds TTLs of its clock, while the
// holder renews every TTL/3, it makes at most one Acquire call to start
// with and one per TTL (the goal: at most one backend call per TTL while
// the holder renews), plus s.SetupWakes, and its check reports it healthy
// throughout. The policy is o with TTL StandbyTTL.
func (s Standby) CountIdle(t testing.TB, o lease.PolicyOptions, start Start) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := "standby/" + rand.Text()[:8]
	h := s.hold(t, ctx, key)
	o.TTL = StandbyTTL
	p, err := lease.NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	w := start(cctx, key, p)
	ttls := 1 + standbyRounds
	for i := range 3 * ttls {
		if err := s.Clock.WaitForTimers(ctx, 1); err != nil {
			t.Fatalf("the contender never slept: %v (%d Acquire calls)", err, w.Calls())
		}
		select {
		case <-w.Elected:
			t.Fatal("the contender was elected while the holder renewed")
		default:
		}
		if w.Check != nil {
			if err := w.Check(); err != nil {
				t.Errorf("the contender's check after %v of waiting: %v", time.Duration(i)*StandbyTTL/3, err)
			}
		}
		s.Clock.Advance(StandbyTTL / 3)
		if err := h.b.Renew(ctx, h.a, StandbyTTL); err != nil {
			t.Fatalf("the holder's renewal %d: %v", i, err)
		}
	}
	stop()
	if err := <-w.Done; err != nil {
		t.Errorf("the contender, stopped: %v", err)
	}
	n := w.Calls()
	t.Logf("%d Acquire calls over %d TTLs of %v", n, ttls, StandbyTTL)
	if limit := int64(1 + ttls + s.SetupWakes); n > limit {
		t.Errorf("an idle contender made %d Acquire calls over %d TTLs, want at most %d: the first, one per TTL, and %d for the backend's wakes of a new watch", n, ttls, limit, s.SetupWakes)
	}
	if n < int64(ttls)-1 {
		t.Errorf("an idle contender made %d Acquire calls over %d TTLs: it no longer checks about once per TTL for a holder that stopped renewing", n, ttls)
	}
}

// HandOver checks how a waiting contender learns of a release. The
// contender's clock never moves by itself, and the holder's lease and the
// policy's Poll are a minute long, so the contender cannot take the key
// unless something wakes it. With notify, the holder's release must: the
// contender is elected within 10s of real time, and if its calls are
// counted as they are made, with one Acquire call after the release.
// Without (a backend without release notifications; it needs a Live
// count), the contender makes no call and is not elected until its clock
// passes Retry; then it asks once and is elected.
func (s Standby) HandOver(t testing.TB, notify bool, start Start) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := "handover/" + rand.Text()[:8]
	h := s.hold(t, ctx, key)
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: StandbyTTL})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	w := start(cctx, key, p)
	defer func() {
		stop()
		if err := <-w.Done; err != nil {
			t.Errorf("the contender, stopped: %v", err)
		}
	}()
	// The contender has asked, found the key held, set up its watch (or
	// failed to) and sleeps; the backend's wakes of a new watch
	// (SetupWakes) pass while its clock stands still: it is quiet once
	// its count stays the same for half a second.
	if err := s.Clock.WaitForTimers(ctx, 1); err != nil {
		t.Fatalf("the contender never slept: %v", err)
	}
	for last, quiet := int64(-1), 0; w.Live && quiet < 5; {
		if ctx.Err() != nil {
			t.Fatalf("the contender never went quiet: %d Acquire calls", w.Calls())
		}
		time.Sleep(100 * time.Millisecond)
		if n := w.Calls(); n == last {
			quiet++
		} else {
			last, quiet = n, 0
		}
	}
	if notify && w.Live && w.Watches() == 0 {
		t.Fatal("the contender set up no release watch")
	}
	before := w.Calls()
	if err := h.b.Release(ctx, h.a); err != nil {
		t.Fatalf("the holder's Release: %v", err)
	}
	if notify {
		select {
		case <-w.Elected:
		case <-time.After(10 * time.Second):
			t.Fatalf("the contender was not elected within 10s of the release: the release notification did not wake it")
		}
		if n := w.Calls() - before; w.Live && n != 1 {
			t.Errorf("the contender made %d Acquire calls after the release, want 1 (woken by the notification)", n)
		}
		return
	}
	if !w.Live {
		t.Fatal("HandOver without notifications needs a Live count")
	}
	// Give a notification, if there were one, a second to arrive.
	select {
	case <-w.Elected:
		t.Fatal("a contender without release notifications was elected without asking")
	case <-time.After(time.Second):
	}
	if n := w.Calls() - before; n != 0 {
		t.Fatalf("the contender made %d Acquire calls after the release while its clock stood still, want 0", n)
	}
	s.Clock.Advance(p.Options().Retry)
	select {
	case <-w.Elected:
	case <-time.After(10 * time.Second):
		t.Fatalf("the contender was not elected within 10s of its clock passing Retry (%d Acquire calls since the release)", w.Calls()-before)
	}
	if n := w.Calls() - before; n != 1 {
		t.Errorf("the contender made %d Acquire calls to take the released key, want 1", n)
	}
}

// CheckQuiet runs CountIdle for the contender run, with default policy
// options, on the memory backend and on every Kind, each in a parallel
// subtest named after the backend.
func CheckQuiet(t *testing.T, run Contender) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		s := MemoryStandby()
		s.CountIdle(t, lease.PolicyOptions{}, s.On(run))
	})
	for _, kind := range Kinds {
		t.Run(kind.Name, func(t *testing.T) {
			t.Parallel()
			s := kind.Env(t).Standby(t)
			s.CountIdle(t, lease.PolicyOptions{}, s.On(run))
		})
	}
}

// CheckHandOver runs HandOver for the contender run, with release
// notifications, on the memory backend and on every Kind, and without
// them (subtest "polling") on every Kind that has a polling backend.
func CheckHandOver(t *testing.T, run Contender) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		s := MemoryStandby()
		s.HandOver(t, true, s.On(run))
	})
	for _, kind := range Kinds {
		t.Run(kind.Name, func(t *testing.T) {
			t.Parallel()
			env := kind.Env(t)
			s := env.Standby(t)
			s.HandOver(t, true, s.On(run))
			if s := env.PollingStandby(t); s != nil {
				t.Run("polling", func(t *testing.T) { s.HandOver(t, false, s.On(run)) })
			}
		})
	}
}
