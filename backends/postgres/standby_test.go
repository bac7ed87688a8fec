package postgres_test

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/backendenv"
	"github.com/golib/lease/lease"
)

// waiter is a plain Client.Acquire as the contender of a
// backendenv.Standby test: it holds the lease it gets until ctx ends.
func waiter(ctx context.Context, c *lease.Client, key string, p lease.Policy, elected func()) (func() error, <-chan error) {
	done := make(chan error, 1)
	go func() {
		h, err := c.Acquire(ctx, key, p)
		switch {
		case err == nil:
			elected()
			<-ctx.Done()
			err = h.Release(context.WithoutCancel(ctx))
		case errors.Is(err, context.Canceled):
			err = nil
		}
		done <- err
	}()
	return nil, done
}

// TestWaiterHandOver: a waiting Client.Acquire whose clock stands still
// takes a released key at once by the release notification, and, with
// DisableNotify, only when its clock passes Retry and it asks.
func TestWaiterHandOver(t *testing.T) {
	t.Parallel()
	env := backendenv.Postgres(t)
	t.Run("notify", func(t *testing.T) {
		s := env.Standby(t)
		s.HandOver(t, true, s.On(waiter))
	})
	t.Run("DisableNotify", func(t *testing.T) {
		s := env.PollingStandby(t)
		s.HandOver(t, false, s.On(waiter))
	})
}

// TestRearmWakesNoWatch: the listener's periodic marking of the watched
// keys wakes no waiter. A wake costs each waiter a backend call, and the
// marks never lapsed while they were renewed every minute, so no release
// went unannounced.
func TestRearmWakesNoWatch(t *testing.T) {
	t.Parallel()
	s, _ := freshStore(t, leasepostgres.Options{})
	ctx := ctxT(t)
	hold := func(key string) lease.Acquisition {
		r := lease.AcquireRequest{Key: key, Owner: "holder", Nonce: rand.Text(), TTL: time.Minute}
		tok, err := s.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return lease.Acquisition{Key: key, Owner: r.Owner, Nonce: r.Nonce, Token: tok}
	}
	hold("a")
	a2, stopA, err := s.WatchReleases(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer stopA()
	// Once a release of b is announced, the listener's LISTEN is in place
	// and has woken every watch once; the marks are set.
	b2, stopB, err := s.WatchReleases(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer stopB()
	for i := 0; ; i++ {
		b := hold("b")
		leasepostgres.WaitMarked(s)
		if err := s.Release(ctx, b); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b2:
		case <-time.After(2 * time.Second):
			if i == 2 {
				t.Fatal("no release notification for b after three releases")
			}
			continue
		}
		break
	}
	leasepostgres.WaitMarked(s)
	for drained := false; !drained; {
		select {
		case <-a2:
		default:
			drained = true
		}
	}
	leasepostgres.Rearm(s)
	select {
	case <-a2:
		t.Fatal("marking the watched keys again woke a waiter of a held key")
	default:
	}
}
