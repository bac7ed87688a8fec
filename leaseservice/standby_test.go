package leaseservice_test

import (
	"context"
	"testing"

	"github.com/golib/lease/internal/backendenv"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseservice"
)

// standby runs a leaseservice.Service as the contender of a
// backendenv.Standby test.
func standby(ctx context.Context, c *lease.Client, key string, p lease.Policy, elected func()) (func() error, <-chan error) {
	done := make(chan error, 1)
	s, err := leaseservice.New(c, key, p, func(ctx context.Context, h *lease.Handle) error {
		elected()
		<-ctx.Done()
		return nil
	}, leaseservice.Options{})
	if err != nil {
		done <- err
		return nil, done
	}
	go func() { done <- s.Run(ctx) }()
	return s.Check, done
}

// TestIdleStandbyIsQuiet: a standby waiting for a key whose holder keeps
// renewing makes at most one Acquire call per TTL (and the first), and is
// healthy however long it waits.
func TestIdleStandbyIsQuiet(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		s := backendenv.MemoryStandby()
		s.CountIdle(t, lease.PolicyOptions{}, s.On(standby))
	})
	for _, kind := range backendenv.Kinds {
		t.Run(kind.Name, func(t *testing.T) {
			t.Parallel()
			s := kind.Env(t).Standby(t)
			s.CountIdle(t, lease.PolicyOptions{}, s.On(standby))
		})
	}
}

// TestStandbyTakesOverByNotification: a standby whose clock stands still
// takes over a released key at once where the backend notifies releases,
// and only when it asks where it does not.
func TestStandbyTakesOverByNotification(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		s := backendenv.MemoryStandby()
		s.HandOver(t, true, s.On(standby))
	})
	for _, kind := range backendenv.Kinds {
		t.Run(kind.Name, func(t *testing.T) {
			t.Parallel()
			env := kind.Env(t)
			s := env.Standby(t)
			s.HandOver(t, true, s.On(standby))
			if s := env.PollingStandby(t); s != nil {
				t.Run("polling", func(t *testing.T) { s.HandOver(t, false, s.On(standby)) })
			}
		})
	}
}
