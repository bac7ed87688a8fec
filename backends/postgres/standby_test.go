package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/golib/lease/internal/backendenv"
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
