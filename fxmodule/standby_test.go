package fxmodule_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/zap"

	leasefx "github.com/golib/lease/fxmodule"
	"github.com/golib/lease/internal/testkit/backendenv"
	"github.com/golib/lease/lease"
)

// attempts counts the module client's Acquire calls from its events: an
// Acquired or AcquireFailed event, sent when a Client.Acquire returns,
// carries the attempts it made.
type attempts struct{ n atomic.Int64 }

func (a *attempts) Observe(e lease.Event) {
	switch e := e.(type) {
	case *lease.Acquired:
		a.n.Add(int64(e.Attempts))
	case *lease.AcquireFailed:
		a.n.Add(int64(e.Attempts))
	}
}

// begin starts a contender of the module's Leases for key, calling
// elected when it holds the lease. It returns the contender's health
// check (or nil) and a channel (or nil) that delivers the contender's own
// error once ctx ended.
type begin func(ctx context.Context, l *leasefx.Leases, key string, elected func()) (check func() error, result <-chan error, err error)

// standbyApp starts an app with the module on bc, a default policy of
// backendenv.StandbyTTL and a FakeClock. It returns a Standby whose
// holder uses the module's own backend, and a Start that begins a
// contender with b once the app has started and stops the app when the
// contender's context ends.
func standbyApp(t *testing.T, bc backendCase, b begin) (backendenv.Standby, backendenv.Start) {
	t.Helper()
	cfg, deps := bc.setup(t)
	cfg.Policy = leasefx.PolicyConfig{TTL: backendenv.StandbyTTL}
	clock := backendenv.NewClock()
	n := &attempts{}
	var (
		leases  *leasefx.Leases
		backend lease.Backend
	)
	a := app(t, cfg, zap.NewNop(), deps,
		fx.Provide(func() lease.Clock { return clock }),
		fx.Provide(fx.Annotate(func() lease.Observer { return n }, fx.ResultTags(`group:"`+leasefx.ObserverGroup+`"`))),
		fx.Populate(&leases, &backend))
	a.RequireStart() // migrates the PostgreSQL table before the holder uses it
	start := func(ctx context.Context, key string, p lease.Policy) backendenv.Waiter {
		elected := make(chan struct{})
		done := make(chan error, 1)
		check, result, err := b(ctx, leases, key, sync.OnceFunc(func() { close(elected) }))
		if err != nil {
			done <- err
		} else {
			context.AfterFunc(ctx, func() {
				err := a.Stop(context.Background())
				if result != nil {
					err = errors.Join(<-result, err)
				}
				done <- err
			})
		}
		return backendenv.Waiter{Calls: n.n.Load, Elected: elected, Check: check, Done: done}
	}
	s := backendenv.Standby{Holder: backend, Clock: clock}
	switch bc.name {
	case "postgres":
		s.SetupWakes = backendenv.PostgresSetupWakes
	case "valkey":
		s.SetupWakes = backendenv.ValkeySetupWakes
	}
	return s, start
}

// goStandby runs a function with Leases.Go.
func goStandby(ctx context.Context, l *leasefx.Leases, key string, elected func()) (func() error, <-chan error, error) {
	svc, err := l.Go(key, func(ctx context.Context, h *lease.Handle) error {
		elected()
		<-ctx.Done()
		return nil
	}, leasefx.RunOptions{})
	if err != nil {
		return nil, nil, err
	}
	return svc.Check, nil, nil
}

// acquireWaiter waits in Leases.Acquire until it gets the lease or ctx
// ends.
func acquireWaiter(ctx context.Context, l *leasefx.Leases, key string, elected func()) (func() error, <-chan error, error) {
	result := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, key)
		switch {
		case err == nil:
			elected()
		case errors.Is(err, context.Canceled):
			err = nil
		}
		result <- err
	}()
	return nil, result, nil
}

// TestIdleStandbysAreQuiet: a function of Leases.Go waiting for a lease
// held elsewhere, and a waiter in Leases.Acquire, make at most one
// Acquire call per TTL (and the first), on every backend.
func TestIdleStandbysAreQuiet(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			for name, b := range map[string]begin{"Go": goStandby, "Acquire": acquireWaiter} {
				t.Run(name, func(t *testing.T) {
					s, start := standbyApp(t, bc, b)
					s.CountIdle(t, lease.PolicyOptions{}, start)
				})
			}
		})
	}
}

// TestGoStandbyTakesOverByNotification: a function of Leases.Go whose
// clock stands still takes over a released lease only by the release
// notification.
func TestGoStandbyTakesOverByNotification(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			s, start := standbyApp(t, bc, goStandby)
			s.HandOver(t, true, start)
		})
	}
}
