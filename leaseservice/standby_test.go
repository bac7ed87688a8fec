package leaseservice_test

import (
	"context"
	"testing"

	"github.com/golib/lease/internal/testkit/backendenv"
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
func TestIdleStandbyIsQuiet(t *testing.T) { backendenv.CheckQuiet(t, standby) }

// TestStandbyTakesOverByNotification: a standby whose clock stands still
// takes over a released key at once where the backend notifies releases,
// and only when it asks where it does not.
func TestStandbyTakesOverByNotification(t *testing.T) { backendenv.CheckHandOver(t, standby) }
