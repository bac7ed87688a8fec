package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/internal/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// TestRun runs the example for a few terms on each backend and checks that
// the lease was handed over between replicas and every fenced write was
// accepted.
func TestRun(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  func(t *testing.T) config
	}{
		{"memory", func(*testing.T) config { return config{} }},
		{"valkey", func(t *testing.T) config { return config{valkeyAddr: testserver.Valkey(t).Addr()} }},
		{"postgres", func(t *testing.T) config {
			return config{postgresURL: testserver.Postgres(t).NewDatabase(t)}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := c.cfg(t)
			cfg.replicas, cfg.term = 3, 500*time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), 2600*time.Millisecond)
			defer cancel()
			var out bytes.Buffer
			if err := run(ctx, cfg, &out); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			got := out.String()
			t.Log("\n" + got)
			owners := map[string]bool{}
			for _, m := range regexp.MustCompile(`(leader-example/\S+) elected with token`).FindAllStringSubmatch(got, -1) {
				owners[m[1]] = true
			}
			if len(owners) < 2 {
				t.Errorf("the lease was never handed over to another replica:\n%s", got)
			}
			if strings.Contains(got, "LOST") || strings.Contains(got, "failed") {
				t.Errorf("a loss or a failure:\n%s", got)
			}
		})
	}
}
