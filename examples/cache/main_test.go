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

// TestRun runs the example against the harness's standalone server and its
// cluster, twice each: a second run starts from an empty entry too.
func TestRun(t *testing.T) {
	for _, topo := range []struct {
		name  string
		addrs func() []string
	}{
		{"standalone", func() []string { return []string{testserver.Valkey(t).Addr()} }},
		{"cluster", func() []string { return testserver.ValkeyCluster(t).Addrs() }},
	} {
		t.Run(topo.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for range 2 {
				var out bytes.Buffer
				if err := run(ctx, &out, topo.addrs()); err != nil {
					t.Fatalf("run: %v\n%s", err, out.String())
				}
				t.Logf("output:\n%s", out.String())
				for _, want := range []string{
					`(?m)^100 requests on 2 replicas: 1 database query; 1 request loaded the report, the other 99 got that load's result$`,
					`(?m)^replica b: total=100 \(hit, published under token \d+\)$`,
					`(?m)^replica b's publication of total=100 was refused: cache: "report/daily" was invalidated after the refresh with token \d+ began`,
					`(?m)^replica a: total=120 \(loaded\)$`,
					`(?m)^replica a's late publication was refused: cache: publish "report/daily": guard: lease "cache:report/daily" token \d+ is no longer current: the record shows token \d+ of "reports/b"$`,
					`(?m)^replica a: total=130 \(hit\)$`,
				} {
					if !regexp.MustCompile(want).MatchString(out.String()) {
						t.Errorf("output lacks %s:\n%s", want, out.String())
					}
				}
			}
		})
	}
}
