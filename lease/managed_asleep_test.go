package lease_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
)

// On the system clock, with a context that cannot end, StartManaged starts
// no goroutine until the first renewal is due. These tests drive that path
// on real time; none of them asserts how long anything took.

// sysFixture returns a client on the system clock over a memory backend
// (also on the system clock) that counts renewals.
func sysFixture(t *testing.T, ttl time.Duration) (*lease.Client, *faulty, *recorder, lease.Policy) {
	t.Helper()
	b := &faulty{Backend: memory.New(memory.Options{})}
	obs := &recorder{}
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "test", Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return c, b, obs, p
}

// endedCtx is a context that has ended.
var endedCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func TestManagedAsleepStopEndsAtOnce(t *testing.T) {
	c, b, obs, p := sysFixture(t, time.Hour)
	h, err := c.Acquire(context.Background(), "k", p)
	if err != nil {
		t.Fatal(err)
	}
	m := manage(t, h, context.Background())
	// Nothing is in flight, so Stop ends the renewer without waiting: even
	// a context that has ended does not cut it short.
	if err := m.Stop(endedCtx); err != nil {
		t.Fatalf("Stop(done ctx) = %v, want nil: the renewer had nothing to wait for", err)
	}
	select {
	case <-m.Done():
	default:
		t.Fatal("Done not closed when Stop returned")
	}
	if cause := context.Cause(m.Context()); !errors.Is(cause, lease.ErrStopped) {
		t.Fatalf("Context cause = %v, want ErrStopped", cause)
	}
	if err := m.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop = %v, want nil", err)
	}
	if err := h.Validate(context.Background()); err != nil {
		t.Fatalf("Validate after Stop = %v; Stop must not release", err)
	}
	if n, l := b.renews.Load(), obs.count(isLost); n != 0 || l != 0 {
		t.Fatalf("%d renewals and %d Lost events, want 0 and 0", n, l)
	}
}

func TestManagedAsleepReleaseEndsIt(t *testing.T) {
	for _, releaseFirst := range []bool{true, false} {
		c, _, obs, p := sysFixture(t, time.Hour)
		h, err := c.Acquire(context.Background(), "k", p)
		if err != nil {
			t.Fatal(err)
		}
		m := manage(t, h, context.Background())
		var relErr, stopErr error
		if releaseFirst {
			relErr = h.Release(context.Background())
			select {
			case <-m.Done():
			default:
				t.Fatal("Done not closed when Release returned")
			}
			stopErr = m.Stop(endedCtx)
		} else {
			stopErr = m.Stop(endedCtx)
			relErr = h.Release(context.Background())
		}
		if relErr != nil || stopErr != nil {
			t.Fatalf("releaseFirst=%v: Release = %v, Stop = %v; want nil, nil", releaseFirst, relErr, stopErr)
		}
		want := lease.ErrStopped
		if releaseFirst {
			want = lease.ErrReleased
		}
		if cause := context.Cause(m.Context()); !errors.Is(cause, want) {
			t.Fatalf("releaseFirst=%v: Context cause = %v, want %v", releaseFirst, cause, want)
		}
		if n := obs.count(isLost); n != 0 || m.Err() != nil {
			t.Fatalf("releaseFirst=%v: %d Lost events, Err %v; want none", releaseFirst, n, m.Err())
		}
	}
}

// TestManagedAsleepWakesToRenew checks that a renewer started asleep
// renews when its first renewal is due, and goes on renewing.
func TestManagedAsleepWakesToRenew(t *testing.T) {
	c, b, obs, p := sysFixture(t, 300*time.Millisecond) // renews every 100ms
	h, err := c.Acquire(context.Background(), "k", p)
	if err != nil {
		t.Fatal(err)
	}
	m := manage(t, h, context.Background())
	giveUp := time.After(time.Minute)
	for obs.count(isRenewed) < 2 {
		select {
		case <-m.Lost():
			t.Fatalf("lost before renewing twice: %v", m.Err())
		case <-giveUp:
			t.Fatalf("%d renewals in a minute, want 2", obs.count(isRenewed))
		case <-time.After(10 * time.Millisecond):
		}
		if b.renews.Load() > 100 {
			t.Fatal("over 100 renewal attempts without two successes")
		}
	}
	if err := m.Stop(context.Background()); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if err := h.Release(context.Background()); err != nil {
		t.Fatalf("Release = %v", err)
	}
}

// TestManagedAsleepLosesWhenRefused checks that the renewer that woke up
// reports a loss the backend tells it of.
func TestManagedAsleepLosesWhenRefused(t *testing.T) {
	c, b, obs, p := sysFixture(t, 300*time.Millisecond)
	h, err := c.Acquire(context.Background(), "k", p)
	if err != nil {
		t.Fatal(err)
	}
	b.failWith(&lease.LostError{Key: "k", Token: h.Token(), Reason: lease.Superseded})
	m := manage(t, h, context.Background())
	select {
	case <-m.Lost():
	case <-time.After(time.Minute):
		t.Fatal("not lost a minute after the backend refused renewals")
	}
	if !errors.Is(m.Err(), lease.ErrLost) || obs.count(isLost) != 1 {
		t.Fatalf("Err = %v with %d Lost events; want ErrLost and one event", m.Err(), obs.count(isLost))
	}
	<-m.Done()
	if err := m.Stop(context.Background()); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Stop after loss = %v, want ErrLost", err)
	}
}

// TestManagedAsleepStartsNoGoroutine checks what the asleep path is for:
// many managed leases stopped or released before their first renewal (work
// items, short jobs) cost no goroutine each while they wait.
func TestManagedAsleepStartsNoGoroutine(t *testing.T) {
	c, _, _, p := sysFixture(t, time.Hour)
	const n = 100
	hs := make([]*lease.Handle, n)
	for i := range hs {
		h, err := c.Acquire(context.Background(), fmt.Sprintf("k%d", i), p)
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	before := runtime.NumGoroutine()
	ms := make([]*lease.Managed, n)
	for i, h := range hs {
		ms[i] = manage(t, h, context.Background())
	}
	// A margin for goroutines of the runtime or of other code; a goroutine
	// per renewer would be n.
	if grew := runtime.NumGoroutine() - before; grew > n/10 {
		t.Errorf("%d managed leases started %d goroutines, want none", n, grew)
	}
	for i, m := range ms {
		if err := m.Stop(context.Background()); err != nil {
			t.Fatalf("Stop = %v", err)
		}
		if err := hs[i].Release(context.Background()); err != nil {
			t.Fatalf("Release = %v", err)
		}
	}
}
