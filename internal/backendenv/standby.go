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
}

// standbyTTL is the TTL of the holder's lease and of the contender's
// policy: long enough that real time, which the holder's lease expires
// on, never runs it out during a test.
const standbyTTL = time.Minute

// MemoryStandby returns a Standby on one memory backend, whose expiry runs
// on the contender's FakeClock.
func MemoryStandby() Standby {
	clock := leasetest.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	mem := leasememory.New(leasememory.Options{Clock: clock})
	return Standby{Holder: mem, Contender: mem, Clock: clock}
}

// Standby returns a Standby on e's server, each side on a backend of its
// own.
func (e *Env) Standby(t testing.TB) Standby {
	return Standby{Holder: e.NewBackend(t, e.Addr), Contender: e.NewBackend(t, e.Addr), Clock: newClock()}
}

// PollingStandby is Standby with a contender's backend without release
// notifications (NewPollingBackend); nil if e has none.
func (e *Env) PollingStandby(t testing.TB) *Standby {
	if e.NewPollingBackend == nil {
		return nil
	}
	return &Standby{Holder: e.NewBackend(t, e.Addr), Contender: e.NewPollingBackend(t, e.Addr), Clock: newClock()}
}

func newClock() *leasetest.FakeClock {
	return leasetest.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
}

// holder holds key on s.Holder directly, as another replica would.
type holder struct {
	t testing.TB
	b lease.Backend
	a lease.Acquisition
}

func (s Standby) hold(t testing.TB, ctx context.Context, key string) *holder {
	t.Helper()
	r := lease.AcquireRequest{Key: key, Owner: "holder", Nonce: rand.Text(), TTL: standbyTTL}
	tok, err := s.Holder.Acquire(ctx, r)
	if err != nil {
		t.Fatalf("the holder's Acquire: %v", err)
	}
	return &holder{t: t, b: s.Holder, a: lease.Acquisition{Key: key, Owner: r.Owner, Nonce: r.Nonce, Token: tok}}
}

// start runs the contender with a client of its own on s.Contender,
// counted, and returns the counts and the contender's parts.
func (s Standby) start(t testing.TB, ctx context.Context, key string, p lease.Policy, run Contender) (*leasetest.Calls, <-chan struct{}, func() error, <-chan error) {
	t.Helper()
	b, calls := leasetest.CountCalls(s.Contender)
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "contender", Clock: s.Clock})
	if err != nil {
		t.Fatal(err)
	}
	elected := make(chan struct{})
	check, done := run(ctx, c, key, p, sync.OnceFunc(func() { close(elected) }))
	if check == nil {
		check = func() error { return nil }
	}
	return calls, elected, check, done
}

// standbyRounds is how many TTLs CountIdle counts over, after one to
// settle.
const standbyRounds = 5

// CountIdle checks that a contender waiting for a key whose holder keeps
// renewing is quiet: over 1+standbyRounds TTLs of its clock, while the
// holder renews every TTL/3, it makes at most one Acquire call to start
// with and one per TTL (the goal: at most one backend call per
// TTL while the holder renews), and its check reports it healthy
// throughout. The policy is p's options with TTL one minute.
func (s Standby) CountIdle(t testing.TB, o lease.PolicyOptions, run Contender) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := "standby/" + rand.Text()[:8]
	h := s.hold(t, ctx, key)
	o.TTL = standbyTTL
	p, err := lease.NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	calls, elected, check, done := s.start(t, cctx, key, p, run)
	ttls := 1 + standbyRounds
	for i := range 3 * ttls {
		if err := s.Clock.WaitForTimers(ctx, 1); err != nil {
			t.Fatalf("the contender never slept: %v (%d Acquire calls)", err, calls.Acquire.Load())
		}
		select {
		case <-elected:
			t.Fatal("the contender was elected while the holder renewed")
		default:
		}
		if err := check(); err != nil {
			t.Errorf("the contender's check after %v of waiting: %v", time.Duration(i)*standbyTTL/3, err)
		}
		s.Clock.Advance(standbyTTL / 3)
		if err := h.b.Renew(ctx, h.a, standbyTTL); err != nil {
			t.Fatalf("the holder's renewal %d: %v", i, err)
		}
	}
	n := calls.Acquire.Load()
	stop()
	if err := <-done; err != nil {
		t.Errorf("the contender, stopped: %v", err)
	}
	t.Logf("%d Acquire calls and %d release-watch setups over %d TTLs of %v", n, calls.WatchReleases.Load(), ttls, standbyTTL)
	if limit := int64(1 + ttls); n > limit {
		t.Errorf("an idle contender made %d Acquire calls over %d TTLs, want at most %d: the first, and one per TTL", n, ttls, limit)
	}
	if n < int64(ttls)-1 {
		t.Errorf("an idle contender made %d Acquire calls over %d TTLs: it no longer checks about once per TTL for a holder that stopped renewing", n, ttls)
	}
}

// HandOver checks how a waiting contender learns of a release. The
// contender's clock never moves by itself, and the holder's lease and the
// policy's Poll are a minute long, so the contender cannot take the key
// unless something wakes it. With notify, the holder's release must: the
// contender is elected within 10s of real time, with one Acquire call
// after the release. Without (a backend without release notifications),
// the contender makes no call and is not elected until its clock passes
// Retry; then it asks once and is elected.
func (s Standby) HandOver(t testing.TB, notify bool, run Contender) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := "handover/" + rand.Text()[:8]
	h := s.hold(t, ctx, key)
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: standbyTTL})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	calls, elected, _, done := s.start(t, cctx, key, p, run)
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the contender, stopped: %v", err)
		}
	}()
	// The contender has asked, found the key held, set up its watch (or
	// failed to) and sleeps.
	if err := s.Clock.WaitForTimers(ctx, 1); err != nil {
		t.Fatalf("the contender never slept: %v", err)
	}
	if notify && calls.WatchReleases.Load() == 0 {
		t.Fatal("the contender set up no release watch")
	}
	before := calls.Acquire.Load()
	if err := h.b.Release(ctx, h.a); err != nil {
		t.Fatalf("the holder's Release: %v", err)
	}
	if notify {
		select {
		case <-elected:
		case <-time.After(10 * time.Second):
			t.Fatalf("the contender was not elected within 10s of the release (%d Acquire calls since): the release notification did not wake it", calls.Acquire.Load()-before)
		}
		if n := calls.Acquire.Load() - before; n != 1 {
			t.Errorf("the contender made %d Acquire calls after the release, want 1 (woken by the notification)", n)
		}
		return
	}
	// Give a notification, if there were one, a second to arrive.
	select {
	case <-elected:
		t.Fatal("a contender without release notifications was elected without asking")
	case <-time.After(time.Second):
	}
	if n := calls.Acquire.Load() - before; n != 0 {
		t.Fatalf("the contender made %d Acquire calls after the release while its clock stood still, want 0", n)
	}
	s.Clock.Advance(p.Options().Retry)
	select {
	case <-elected:
	case <-time.After(10 * time.Second):
		t.Fatalf("the contender was not elected within 10s of its clock passing Retry (%d Acquire calls since the release)", calls.Acquire.Load()-before)
	}
	if n := calls.Acquire.Load() - before; n != 1 {
		t.Errorf("the contender made %d Acquire calls to take the released key, want 1", n)
	}
}
