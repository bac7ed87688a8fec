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
