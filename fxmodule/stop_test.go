package fxmodule_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"
	"go.uber.org/fx"
	"go.uber.org/zap/zapcore"

	leasefx "github.com/golib/lease/fxmodule"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// TestStopReportsFailedReleases stops the app while its Valkey server is
// paused: neither the function's lease nor the acquired one can be
// released, and Stop says so for both, and logs each, instead of reporting
// success.
func TestStopReportsFailedReleases(t *testing.T) {
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	c := valkeyClient(t, srv.Addr())
	// A TTL long enough that no loss is detected before the releases are
	// tried, even on a slow machine: a lost lease is not reported at stop.
	cfg := leasefx.Config{Owner: "test/stop", Backend: leasefx.Valkey, Policy: leasefx.PolicyConfig{TTL: 10 * time.Second},
		ReleaseTimeout: 200 * time.Millisecond}
	logger, recorded := logs()
	var leases *leasefx.Leases
	started := make(chan struct{}, 1)
	a := app(t, cfg, logger,
		fx.Provide(func() valkey.Client { return c }),
		fx.Populate(&leases),
		fx.Invoke(func(l *leasefx.Leases) error {
			_, err := l.Go("singleton", func(ctx context.Context, h *lease.Handle) error {
				started <- struct{}{}
				<-ctx.Done()
				return nil
			}, leasefx.RunOptions{})
			return err
		}))
	a.RequireStart()
	within(t, started, "the function to start")
	if _, err := leases.Acquire(ctxT(t), "tracked"); err != nil {
		t.Fatal(err)
	}

	srv.Pause()
	err := a.Stop(ctxT(t))
	srv.Resume()

	if err == nil {
		t.Fatal("Stop = nil while no release could reach the server")
	}
	for _, key := range []string{"singleton", "tracked"} {
		if !strings.Contains(err.Error(), `"`+key+`"`) {
			t.Errorf("Stop's error does not name %q: %v", key, err)
		}
	}
	if !errors.Is(err, lease.ErrIndeterminate) {
		t.Errorf("Stop's error %v does not say the outcome is unknown", err)
	}
	failed := recorded.FilterMessageSnippet("not released on stop").FilterLevelExact(zapcore.ErrorLevel)
	if failed.Len() != 2 {
		t.Errorf("%d error lines for failed releases, want 2: %v", failed.Len(), recorded.All())
	}
	if n := recorded.FilterMessage("lease released").Len(); n != 0 {
		t.Errorf("%d \"lease released\" lines for releases that failed", n)
	}
}

// TestStopDeadline: a function that ignores its context past the stop
// deadline makes the app's Stop fail and is logged by name; its lease is
// released once it returns.
func TestStopDeadline(t *testing.T) {
	cfg := leasefx.Config{Owner: "test/deadline", Backend: leasefx.Memory, Policy: testPolicy}
	logger, recorded := logs()
	var (
		leases  *leasefx.Leases
		backend lease.Backend
	)
	started := make(chan struct{}, 1)
	finish := make(chan struct{})
	returned := make(chan struct{})
	a := app(t, cfg, logger,
		fx.Populate(&leases, &backend),
		fx.Invoke(func(l *leasefx.Leases) error {
			_, err := l.Go("stubborn", func(ctx context.Context, h *lease.Handle) error {
				defer close(returned)
				started <- struct{}{}
				<-finish // ignores ctx
				return nil
			}, leasefx.RunOptions{})
			return err
		}))
	a.RequireStart()
	within(t, started, "the function to start")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := a.Stop(ctx)
	cancel()
	// Fx returns the deadline's error when a hook outlives it; the hook
	// logs which function held it up.
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop = %v, want the stop deadline's error", err)
	}
	waitFor(t, "a log line naming the function", func() bool {
		lines := recorded.FilterMessageSnippet("did not return before the stop deadline").All()
		return len(lines) == 1 && lines[0].ContextMap()["key"] == "stubborn"
	})

	close(finish)
	within(t, returned, "the function to return")
	// The term releases the lease after the function returned.
	waitFor(t, "the lease to be released", func() bool {
		r, err := backend.Inspect(context.Background(), leases.Key("stubborn"))
		return err == nil && !r.Held
	})
}

// waitFor polls cond until it holds, failing t after a minute (a bound for
// a hung test, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
