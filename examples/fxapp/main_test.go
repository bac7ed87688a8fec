package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	leasefx "github.com/golib/lease/fxmodule"
	"github.com/golib/lease/internal/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// output is an io.Writer that two replicas share.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits until the output matches re and returns the submatches,
// failing t after a minute (a bound for a hung test).
func (o *output) waitFor(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if m := re.FindStringSubmatch(o.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("output never matched %v:\n%s", re, o.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTwoReplicas runs two replicas of the app in one process: only the
// first runs the reporter; when it stops, the second takes over, well
// within one TTL, with a higher token.
func TestTwoReplicas(t *testing.T) {
	for _, backend := range []string{"valkey", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			// A long TTL: taking over after a clean stop must not depend
			// on it, so the check below has a wide margin on a slow machine.
			const ttl = 10 * time.Second
			base := settings{TTL: ttl, Every: 50 * time.Millisecond}
			if backend == "valkey" {
				base.ValkeyAddr = testserver.Valkey(t).Addr()
			} else {
				base.PostgresURL = testserver.Postgres(t).NewDatabase(t)
			}
			logger := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
			var out output
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			a, b := base, base
			a.Replica, b.Replica = "a", "b"
			appA, appB := newApp(a, logger, &out), newApp(b, logger, &out)
			if err := appA.Start(ctx); err != nil {
				t.Fatal(err)
			}
			tokenA := out.waitFor(t, regexp.MustCompile(`a: elected with token (\d+)`))[1]
			if err := appB.Start(ctx); err != nil {
				t.Fatal(err)
			}
			// While a holds the lease, b only campaigns.
			out.waitFor(t, regexp.MustCompile(`a: report 3 `))
			if strings.Contains(out.String(), "b: elected") {
				t.Fatalf("b was elected while a held the lease:\n%s", out.String())
			}

			if err := appA.Stop(ctx); err != nil {
				t.Fatalf("stop a: %v", err)
			}
			stopped := time.Now()
			tokenB := out.waitFor(t, regexp.MustCompile(`b: elected with token (\d+)`))[1]
			if took := time.Since(stopped); took >= ttl {
				t.Errorf("b took over %v after a stopped, not within one TTL (%v)", took, ttl)
			}
			out.waitFor(t, regexp.MustCompile(`b: report 1 `))
			if err := appB.Stop(ctx); err != nil {
				t.Fatalf("stop b: %v", err)
			}

			ta, _ := strconv.ParseUint(tokenA, 10, 64)
			tb, _ := strconv.ParseUint(tokenB, 10, 64)
			if tb <= ta {
				t.Errorf("b's token %d is not above a's %d", tb, ta)
			}
			for _, want := range []string{"a: stepping down: leasefx: the app is stopping", "b: stepping down: leasefx: the app is stopping"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			t.Logf("output:\n%s", out.String())
		})
	}
}

// TestReporterOnMemory tests the singleton without a server: the memory
// backend in place of the application's storage.
func TestReporterOnMemory(t *testing.T) {
	var out output
	// docs:begin testing
	app := fxtest.New(t,
		fx.NopLogger,
		fx.Supply(settings{Replica: "test", Every: time.Millisecond}),
		fx.Provide(func() io.Writer { return &out }, newReporter),
		fx.Supply(leasefx.Config{Owner: "test", Backend: leasefx.Memory}),
		leasefx.Module,
		fx.Invoke(startReporter),
	)
	app.RequireStart()
	out.waitFor(t, regexp.MustCompile(`test: report 2 under token \d+`))
	app.RequireStop()
	// docs:end testing
}
