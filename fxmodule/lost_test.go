package fxmodule_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"
	"go.uber.org/fx"
	"go.uber.org/zap/zapcore"

	leasefx "github.com/golib/lease/fxmodule"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseservice"
)

// TestLostLeaseShutsAppDown pauses a dedicated Valkey server past the TTL
// while a function runs under a lease with ShutdownOnLoss: the function's
// context is cancelled with the loss, and the app shuts down with the
// exit code.
func TestLostLeaseShutsAppDown(t *testing.T) {
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	c := valkeyClient(t, srv.Addr())
	cfg := leasefx.Config{Owner: "test/lost", Backend: leasefx.Valkey, Policy: testPolicy}
	logger, recorded := logs()
	started := make(chan struct{}, 1)
	ended := make(chan error, 1)
	run := func(ctx context.Context, h *lease.Handle) error {
		started <- struct{}{}
		<-ctx.Done()
		ended <- context.Cause(ctx)
		return ctx.Err()
	}
	a := app(t, cfg, logger,
		fx.Provide(func() valkey.Client { return c }),
		fx.Invoke(func(l *leasefx.Leases) error {
			_, err := l.Go("singleton", run, leasefx.RunOptions{ShutdownOnLoss: true, ExitCode: 3})
			return err
		}))
	a.RequireStart()
	shutdown := a.Wait()
	within(t, started, "the function to start")

	srv.Pause()
	cause := within(t, ended, "the function's context to be cancelled")
	sig := within(t, shutdown, "the app to shut down")
	srv.Resume()
	a.RequireStop()

	if !errors.Is(cause, lease.ErrLost) {
		t.Errorf("the function's context ended with cause %v, want a loss", cause)
	}
	if sig.ExitCode != 3 {
		t.Errorf("shutdown signal %+v, want exit code 3", sig)
	}
	if n := recorded.FilterMessage("lease lost").FilterLevelExact(zapcore.ErrorLevel).Len(); n != 1 {
		t.Errorf("%d error lines \"lease lost\", want 1", n)
	}
	lines := recorded.FilterMessageSnippet("shutting the app down").All()
	if len(lines) != 1 || lines[0].ContextMap()["exitCode"] != int64(3) {
		t.Errorf("shutdown lines %v, want one with exitCode 3", lines)
	}
}

// TestFailedFunctionShutsAppDown: with ShutdownOnError, a function that
// fails shuts the app down with exit code 1.
func TestFailedFunctionShutsAppDown(t *testing.T) {
	cfg := leasefx.Config{Owner: "test/failed", Backend: leasefx.Memory, Policy: testPolicy}
	logger, recorded := logs()
	var backend lease.Backend
	var leases *leasefx.Leases
	a := app(t, cfg, logger,
		fx.Populate(&backend, &leases),
		fx.Invoke(func(l *leasefx.Leases) error {
			_, err := l.Go("singleton", func(context.Context, *lease.Handle) error {
				return errors.New("boom")
			}, leasefx.RunOptions{ShutdownOnError: true})
			return err
		}))
	a.RequireStart()
	sig := within(t, a.Wait(), "the app to shut down")
	a.RequireStop()
	if sig.ExitCode != 1 {
		t.Errorf("shutdown signal %+v, want exit code 1", sig)
	}
	lines := recorded.FilterMessage("function under the lease failed").All()
	if len(lines) != 1 || lines[0].ContextMap()["error"] != "boom" {
		t.Errorf("lines %v, want one with error boom", lines)
	}
	requireFree(t, backend, leases.Key("singleton"))
}

// TestFailedFunctionRunsAgain: by default a function that fails is logged
// and run again after a pause, never left dead while the app runs; Check
// reports the service healthy meanwhile.
func TestFailedFunctionRunsAgain(t *testing.T) {
	cfg := leasefx.Config{Owner: "test/again", Backend: leasefx.Memory, Policy: testPolicy}
	logger, recorded := logs()
	var leases *leasefx.Leases
	var calls atomic.Int32
	running := make(chan struct{})
	a := app(t, cfg, logger,
		fx.Populate(&leases),
		fx.Invoke(func(l *leasefx.Leases) error {
			_, err := l.Go("singleton", func(ctx context.Context, h *lease.Handle) error {
				if calls.Add(1) <= 2 {
					return errors.New("boom")
				}
				close(running)
				<-ctx.Done()
				return nil
			}, leasefx.RunOptions{Service: leaseservice.Options{RestartDelay: 10 * time.Millisecond}})
			return err
		}))
	if err := leases.Check(); err == nil {
		t.Error("Check before Start = nil, want the service not campaigning")
	}
	a.RequireStart()
	within(t, running, "the third run")
	if err := leases.Check(); err != nil {
		t.Errorf("Check while the function runs = %v", err)
	}
	a.RequireStop()
	lines := recorded.FilterMessage("function under the lease failed; running it again after a pause").FilterLevelExact(zapcore.ErrorLevel).All()
	if len(lines) != 2 || lines[0].ContextMap()["error"] != "boom" {
		t.Errorf("lines %v, want two with error boom", lines)
	}
	if err := leases.Check(); err == nil {
		t.Error("Check after Stop = nil, want the service not campaigning")
	}
}

// TestCheckReportsAStoppedService: with StopOnError, a failure ends the
// campaign, and Check says which service and why.
func TestCheckReportsAStoppedService(t *testing.T) {
	cfg := leasefx.Config{Owner: "test/stopped", Backend: leasefx.Memory, Policy: testPolicy}
	logger, _ := logs()
	var leases *leasefx.Leases
	var svc *leaseservice.Service
	a := app(t, cfg, logger,
		fx.Populate(&leases),
		fx.Invoke(func(l *leasefx.Leases) (err error) {
			svc, err = l.Go("singleton", func(ctx context.Context, h *lease.Handle) error {
				return errors.New("boom")
			}, leasefx.RunOptions{Service: leaseservice.Options{StopOnError: true}})
			return err
		}))
	a.RequireStart()
	defer a.RequireStop()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		// Until the service's goroutine has called Run, Check reports that
		// Run has not been called; then nil while it runs the function.
		if err := leases.Check(); err != nil && strings.Contains(err.Error(), "Run returned") {
			want := fmt.Sprintf("leaseservice: %q: not campaigning: Run returned: boom", leases.Key("singleton"))
			if err.Error() != want {
				t.Fatalf("Check = %q, want %q", err, want)
			}
			if svc.Check() == nil {
				t.Fatal("the service's own Check = nil")
			}
			return
		}
	}
	t.Fatal("Check never reported the stopped service")
}
