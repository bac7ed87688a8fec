package fxmodule_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	leasefx "github.com/golib/lease/fxmodule"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// ctxT returns a context that ends with t, and after a minute at most.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// testPolicy is short enough for a test and long enough for a loaded
// machine: renewals every 300ms, a local lifetime of 1.5s.
var testPolicy = leasefx.PolicyConfig{TTL: 1800 * time.Millisecond, RenewEvery: 300 * time.Millisecond}

var seq atomic.Int64

// unique returns a string no other call in this test binary returns.
func unique(prefix string) string {
	return fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), seq.Add(1))
}

// valkeyClient returns a valkey-go client for addr, closed when t ends.
func valkeyClient(t testing.TB, addr string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey.NewClient(%s): %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// pgPool returns a pool on a fresh database of the shared server, closed
// when t ends.
func pgPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := testserver.Postgres(t).NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// backendCase is one backend the module can be configured with.
type backendCase struct {
	name string
	// setup returns the config and the options that provide the
	// application's own dependencies for it.
	setup func(t *testing.T) (leasefx.Config, fx.Option)
}

func backends() []backendCase {
	return []backendCase{
		{"memory", func(t *testing.T) (leasefx.Config, fx.Option) {
			return leasefx.Config{Owner: "test/memory", Backend: leasefx.Memory, Policy: testPolicy}, fx.Options()
		}},
		{"valkey", func(t *testing.T) (leasefx.Config, fx.Option) {
			c := valkeyClient(t, testserver.Valkey(t).Addr())
			cfg := leasefx.Config{Owner: "test/valkey", Backend: leasefx.Valkey, Policy: testPolicy,
				Valkey: leasefx.ValkeyConfig{Prefix: unique("fx") + ":", Check: true}}
			return cfg, fx.Provide(func() valkey.Client { return c })
		}},
		{"postgres", func(t *testing.T) (leasefx.Config, fx.Option) {
			pool := pgPool(t)
			cfg := leasefx.Config{Owner: "test/postgres", Backend: leasefx.Postgres, Policy: testPolicy,
				Postgres: leasefx.PostgresConfig{Migrate: true}}
			return cfg, fx.Supply(pool)
		}},
	}
}

// logs returns a zap logger that records every entry at Debug and above.
func logs() (*zap.Logger, *observer.ObservedLogs) {
	core, recorded := observerAt(zapcore.DebugLevel)
	return zap.New(core), recorded
}

// observerAt returns a core that records entries at level and above.
func observerAt(level zapcore.Level) (zapcore.Core, *observer.ObservedLogs) {
	return observer.New(level)
}

// app builds a test app with the module, cfg and opts, logging to logger.
func app(t *testing.T, cfg leasefx.Config, logger *zap.Logger, opts ...fx.Option) *fxtest.App {
	t.Helper()
	return fxtest.New(t, append([]fx.Option{
		fx.NopLogger,
		fx.Supply(cfg, logger),
		leasefx.Module,
	}, opts...)...)
}

// requireFree fails t unless key is free on b.
func requireFree(t *testing.T, b lease.Backend, key string) {
	t.Helper()
	r, err := b.Inspect(ctxT(t), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	if r.Held {
		t.Fatalf("%q still held after stop: %+v", key, r)
	}
}

// within receives from ch, failing t if nothing arrives within a minute
// (a bound for a hung test, not a timing assertion).
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
