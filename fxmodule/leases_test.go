package fxmodule_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/fx"

	leasefx "github.com/golib/lease/fxmodule"
	"github.com/golib/lease/lease"
)

// TestWithoutFx builds the module by hand: New, then Start and Stop.
func TestWithoutFx(t *testing.T) {
	r, err := leasefx.New(leasefx.Params{Config: leasefx.Config{Owner: "test/plain", Backend: leasefx.Memory, KeyPrefix: "svc/", Policy: testPolicy}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	l := r.Leases
	if _, err := l.Acquire(ctx, "k"); !errors.Is(err, leasefx.ErrNotStarted) {
		t.Fatalf("Acquire before Start = %v, want ErrNotStarted", err)
	}
	if _, err := l.Go("k", func(context.Context, *lease.Handle) error { return nil }, leasefx.RunOptions{ShutdownOnLoss: true}); err == nil {
		t.Error("Go with ShutdownOnLoss and no Shutdowner succeeded")
	}
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(ctx); err == nil {
		t.Error("a second Start succeeded")
	}

	x, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if x.Handle().Key() != "svc/k" || l.Key("k") != "svc/k" {
		t.Errorf("key %q, want the prefix in front", x.Handle().Key())
	}
	if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, lease.ErrNotAcquired) {
		t.Errorf("second TryAcquire = %v, want ErrNotAcquired", err)
	}
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(x.Context()), lease.ErrReleased) {
		t.Errorf("context cause after Release = %v, want ErrReleased", context.Cause(x.Context()))
	}
	if x.Err() != nil {
		t.Errorf("Err() = %v after a release", x.Err())
	}
	select {
	case <-x.Lost():
		t.Error("Lost() closed after a release")
	default:
	}

	if err := l.Stop(ctx); err != nil {
		t.Fatalf("Stop after the only lease was released: %v", err)
	}
	if err := l.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := l.Go("k", func(context.Context, *lease.Handle) error { return nil }, leasefx.RunOptions{}); !errors.Is(err, leasefx.ErrClosed) {
		t.Errorf("Go after Stop = %v, want ErrClosed", err)
	}
	if err := l.Start(ctx); err == nil {
		t.Error("Start after Stop succeeded")
	}
}

// recorder is a lease.Observer that keeps the events' types.
type recorder struct {
	mu    sync.Mutex
	kinds []string
}

func (r *recorder) Observe(e lease.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.(type) {
	case *lease.Acquired:
		r.kinds = append(r.kinds, "acquired")
	case *lease.Released:
		r.kinds = append(r.kinds, "released")
	}
}

// TestObserverGroup: observers provided to the group see every event.
func TestObserverGroup(t *testing.T) {
	rec := &recorder{}
	var leases *leasefx.Leases
	a := app(t, leasefx.Config{Owner: "test/group", Backend: leasefx.Memory, Policy: testPolicy}, nil,
		fx.Provide(fx.Annotate(func() lease.Observer { return rec }, fx.ResultTags(`group:"`+leasefx.ObserverGroup+`"`))),
		fx.Populate(&leases))
	a.RequireStart()
	if _, err := leases.Acquire(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	a.RequireStop()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.kinds) != 2 || rec.kinds[0] != "acquired" || rec.kinds[1] != "released" {
		t.Errorf("the group's observer saw %v, want [acquired released]", rec.kinds)
	}
}

// TestGoAfterStart: a function registered after the app started runs at
// once, and is stopped with the app.
func TestGoAfterStart(t *testing.T) {
	var leases *leasefx.Leases
	a := app(t, leasefx.Config{Owner: "test/late", Backend: leasefx.Memory, Policy: testPolicy}, nil, fx.Populate(&leases))
	a.RequireStart()
	started := make(chan struct{})
	ended := make(chan error, 1)
	_, err := leases.Go("late", func(ctx context.Context, h *lease.Handle) error {
		close(started)
		<-ctx.Done()
		ended <- context.Cause(ctx)
		return nil
	}, leasefx.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	within(t, started, "the function to start")
	a.RequireStop()
	if cause := within(t, ended, "the function to end"); !errors.Is(cause, leasefx.ErrStopping) {
		t.Errorf("cause %v, want ErrStopping", cause)
	}
}
