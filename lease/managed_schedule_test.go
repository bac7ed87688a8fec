package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
)

func TestManagedStartedLateRenewsAtOnce(t *testing.T) {
	// Acquired at epoch; the renewer starts at 20s, when the renewal that
	// was due at 10s is overdue and the deadline (25s) is near. It renews
	// at once instead of RenewEvery after it started, which would be past
	// the deadline.
	f := newFixture(t)
	h := f.acquire(t)
	f.clock.Advance(20 * time.Second)
	m := manage(t, h, context.Background())
	defer m.Stop(context.Background())
	f.step(t, 0) // the renewer renewed and sleeps again
	if n := f.obs.count(isRenewed); n != 1 {
		t.Fatalf("%d renewals right after a late start, want 1", n)
	}
	if got, want := h.Deadline(), f.clock.Now().Add(h.Policy().LocalLifetime()); !got.Equal(want) {
		t.Fatalf("deadline %v, want %v", got, want)
	}
	select {
	case <-m.Lost():
		t.Fatalf("lost: %v", m.Err())
	default:
	}
}

// slowRenew makes each renewal take d on the fake clock.
type slowRenew struct {
	*faulty
	f *fixture
	d time.Duration
}

func (s *slowRenew) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	s.f.clock.Advance(s.d)
	return s.faulty.Renew(ctx, a, ttl)
}

func TestManagedCadenceCountsFromSendTime(t *testing.T) {
	// Each renewal takes 3s. The next one is due RenewEvery (10s, less
	// jitter) after the last was sent, so at most 7s after it returned:
	// slow renewals do not push the schedule back.
	f := newFixture(t)
	slow := &slowRenew{faulty: f.b, f: f, d: 3 * time.Second}
	c, err := lease.NewClient(slow, lease.ClientOptions{Owner: "test", Clock: f.clock, Observer: f.obs})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.TryAcquire(context.Background(), "k", f.p)
	if err != nil {
		t.Fatal(err)
	}
	m := manage(t, h, context.Background())
	defer m.Stop(context.Background())
	f.step(t, 10*time.Second) // the first renewal: sent at 10s at the latest, returns 3s later
	f.step(t, 0)
	if n := f.b.renews.Load(); n != 1 {
		t.Fatalf("%d renewals after 10s, want 1", n)
	}
	sent := h.Deadline().Add(-h.Policy().LocalLifetime())
	f.step(t, sent.Add(10*time.Second).Sub(f.clock.Now()))
	f.step(t, 0)
	if n := f.b.renews.Load(); n != 2 {
		t.Fatalf("%d renewals %v after the first was sent, want 2", n, 10*time.Second)
	}
}

// hangingRenew wraps a backend whose Renew, once hang is set, ignores its
// context and returns only when unblock is closed: a backend that breaks
// the contract.
type hangingRenew struct {
	lease.Backend
	hang     atomic.Bool
	inRenew  atomic.Bool
	unblock  chan struct{}
	returned chan struct{}
}

func (b *hangingRenew) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	if !b.hang.Load() {
		return b.Backend.Renew(ctx, a, ttl)
	}
	b.inRenew.Store(true)
	<-b.unblock
	b.inRenew.Store(false)
	defer close(b.returned)
	return ctx.Err()
}

func TestManagedLosesAtDeadlineWhenBackendHangs(t *testing.T) {
	// On the system clock with a short TTL: the renewal hangs past the
	// local deadline, ignoring its context. The loss is reported while the
	// backend call is still blocked, not when it returns.
	b := &hangingRenew{Backend: memory.New(memory.Options{}), unblock: make(chan struct{}), returned: make(chan struct{})}
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 400 * time.Millisecond, RenewEvery: 100 * time.Millisecond,
		SafetyMargin: 100 * time.Millisecond, OperationTimeout: 50 * time.Millisecond, Retry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.TryAcquire(context.Background(), "k", p)
	if err != nil {
		t.Fatal(err)
	}
	b.hang.Store(true)
	m := manage(t, h, context.Background())
	select {
	case <-m.Lost():
	case <-time.After(10 * time.Second):
		close(b.unblock)
		t.Fatal("no loss while the backend hung")
	}
	stillBlocked := b.inRenew.Load()
	close(b.unblock)
	<-b.returned
	if err := m.Stop(context.Background()); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Stop = %v, want the loss", err)
	}
	if !stillBlocked {
		t.Fatal("the loss came only after the hanging backend call returned")
	}
	var le *lease.LostError
	if err := m.Err(); !errors.As(err, &le) || le.Reason != lease.DeadlinePassed || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err() = %v, want the local deadline passed, wrapping context.DeadlineExceeded", err)
	}
	if !time.Now().After(h.Deadline()) {
		t.Fatalf("lost before the local deadline %v", h.Deadline())
	}
}
