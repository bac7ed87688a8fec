package fxmodule_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/zap/zapcore"

	leasefx "github.com/golib/lease/fxmodule"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseservice"
)

func TestValidateApp(t *testing.T) {
	err := fx.ValidateApp(
		fx.NopLogger,
		fx.Supply(leasefx.Config{Owner: "test", Backend: leasefx.Memory}),
		leasefx.Module,
		fx.Invoke(func(*lease.Client, lease.Backend, lease.Policy, *leasefx.Leases) {}),
	)
	if err != nil {
		t.Fatal(err)
	}
}

// term records what a function run with Leases.Go saw.
type term struct {
	token lease.Token
	// heldAfterCancel is the backend's record read after the function's
	// context was cancelled, before it returned.
	heldAfterCancel lease.Record
	cause           error
}

// TestBackends starts an app on each backend, runs a function under a
// lease and holds a second lease through Leases.Acquire, then stops it: the
// function's context is cancelled while its lease is still held, and both
// leases are free afterwards.
func TestBackends(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			cfg, deps := bc.setup(t)
			cfg.Preferred = true
			logger, recorded := logs()
			var (
				leases  *leasefx.Leases
				backend lease.Backend
				client  *lease.Client
				svc     *leaseservice.Service
				started = make(chan lease.Token, 1)
				ended   = make(chan term, 1)
			)
			run := func(ctx context.Context, h *lease.Handle) error {
				started <- h.Token()
				<-ctx.Done()
				r, _ := backend.Inspect(context.WithoutCancel(ctx), h.Key())
				ended <- term{token: h.Token(), heldAfterCancel: r, cause: context.Cause(ctx)}
				return ctx.Err()
			}
			a := app(t, cfg, logger, deps,
				fx.Populate(&leases, &backend, &client),
				fx.Invoke(func(l *leasefx.Leases) (err error) {
					svc, err = l.Go("singleton", run, leasefx.RunOptions{})
					return err
				}))
			a.RequireStart()
			if !client.Preferred() {
				t.Error("the client in the graph does not ask to be preferred with Config.Preferred set")
			}
			token := within(t, started, "the function to start")
			if !svc.IsLeader() {
				t.Error("IsLeader() = false while the function runs")
			}

			ctx := ctxT(t)
			held, err := leases.Acquire(ctx, "tracked")
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			r, err := client.Inspect(ctx, leases.Key("tracked"))
			if err != nil || !r.Held || r.Token != held.Handle().Token() || r.Owner != cfg.Owner {
				t.Fatalf("Inspect(tracked) = %+v, %v; want held by %s with token %d", r, err, cfg.Owner, held.Handle().Token())
			}

			a.RequireStop()

			got := within(t, ended, "the function to end")
			if !errors.Is(got.cause, leasefx.ErrStopping) {
				t.Errorf("the function's context ended with cause %v, want ErrStopping", got.cause)
			}
			if !got.heldAfterCancel.Held || got.heldAfterCancel.Token != token {
				t.Errorf("after the function's context was cancelled the lease was %+v; want still held with token %d until the function returned", got.heldAfterCancel, token)
			}
			if !errors.Is(context.Cause(held.Context()), leasefx.ErrStopping) {
				t.Errorf("the acquired lease's context ended with cause %v, want ErrStopping", context.Cause(held.Context()))
			}
			requireFree(t, backend, leases.Key("singleton"))
			requireFree(t, backend, leases.Key("tracked"))
			if _, err := leases.Acquire(ctx, "after"); !errors.Is(err, leasefx.ErrClosed) {
				t.Errorf("Acquire after stop = %v, want ErrClosed", err)
			}
			for _, msg := range []string{"lease acquired", "lease released"} {
				if n := recorded.FilterMessage(msg).FilterLoggerName("lease").Len(); n < 2 {
					t.Errorf("%d %q lines from the logger named lease, want 2 or more", n, msg)
				}
			}
			if n := recorded.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 0 {
				t.Errorf("%d error lines: %v", n, recorded.FilterLevelExact(zapcore.ErrorLevel).All())
			}
		})
	}
}
