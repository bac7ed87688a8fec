package fxmodule_test

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/fx"

	leasefx "github.com/golib/lease/fxmodule"
	"github.com/golib/lease/lease"
)

// An app that runs a singleton function while it holds a lease. Stopping
// the app cancels the function, waits for it, and releases the lease.
func Example() {
	running := make(chan struct{})
	app := fx.New(
		fx.NopLogger,
		fx.Supply(leasefx.Config{Owner: "example/replica-1", Backend: leasefx.Memory}),
		leasefx.Module,
		fx.Invoke(func(leases *leasefx.Leases) error {
			_, err := leases.Go("nightly-report", func(ctx context.Context, h *lease.Handle) error {
				fmt.Println("running under", h.Key())
				close(running)
				<-ctx.Done()
				fmt.Println("stopping:", errors.Is(context.Cause(ctx), leasefx.ErrStopping))
				return nil
			}, leasefx.RunOptions{})
			return err
		}),
	)
	ctx := context.Background()
	if err := app.Start(ctx); err != nil {
		panic(err)
	}
	<-running
	if err := app.Stop(ctx); err != nil {
		panic(err)
	}
	fmt.Println("stopped")
	// Output:
	// running under nightly-report
	// stopping: true
	// stopped
}

// docs:begin acquire
// exportBatch holds the lease on "export/<batch>" while it exports the
// batch, so that two replicas never export the same batch at once.
func exportBatch(ctx context.Context, leases *leasefx.Leases, batch string) error {
	l, err := leases.TryAcquire(ctx, "export/"+batch)
	if err != nil {
		return err // matches lease.ErrNotAcquired if another replica is on it
	}
	// A failed release is logged by the module's observer.
	defer l.Release(context.WithoutCancel(ctx))

	// Work under l.Context(): it ends when the lease is lost or the app
	// stops. Every protected write carries the token.
	return export(l.Context(), batch, l.Handle().Token())
}

// docs:end acquire

func export(ctx context.Context, batch string, token lease.Token) error {
	fmt.Printf("exporting %s under a token: %v\n", batch, token > 0)
	return ctx.Err()
}

// Acquiring a lease for one piece of work, from code that has *Leases
// injected (an HTTP handler, a queue consumer).
func ExampleLeases_Acquire() {
	var leases *leasefx.Leases
	app := fx.New(
		fx.NopLogger,
		fx.Supply(leasefx.Config{Owner: "example/replica-1", Backend: leasefx.Memory}),
		leasefx.Module,
		fx.Populate(&leases),
	)
	ctx := context.Background()
	if err := app.Start(ctx); err != nil {
		panic(err)
	}
	defer app.Stop(ctx)

	if err := exportBatch(ctx, leases, "2026-11"); err != nil {
		fmt.Println(err)
	}
	// Output:
	// exporting 2026-11 under a token: true
}
