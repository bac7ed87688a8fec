package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/golib/lease/internal/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// TestRun runs the example for a few seconds on each backend and checks
// that no slot ran twice and that some slots ran.
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
			cfg.replicas = 3
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
			defer cancel()
			var out bytes.Buffer
			if err := run(ctx, cfg, &out); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			got := out.String()
			t.Log("\n" + got)
			runs := map[string]int{}
			for _, m := range regexp.MustCompile(`ran report for slot (\S+) with token`).FindAllStringSubmatch(got, -1) {
				runs[m[1]]++
			}
			if len(runs) < 2 {
				t.Errorf("%d slots ran in 4s:\n%s", len(runs), got)
			}
			for slot, n := range runs {
				if n != 1 {
					t.Errorf("slot %s ran %d times", slot, n)
				}
			}
		})
	}
}
