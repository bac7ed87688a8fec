package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/internal/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// TestRun runs the example against the harness's server, twice: the second
// run gets a higher token and its fenced write is accepted too.
func TestRun(t *testing.T) {
	addr := testserver.Valkey(t).Addr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		var out bytes.Buffer
		if err := run(ctx, config{addr: addr}, &out); err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
		for _, want := range []string{"acquired \"reports/daily\" with token", "wrote the report under token", "released; shutting down"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
	}
}
