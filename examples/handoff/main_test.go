package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/golib/lease/internal/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// TestRun plays the story and checks it line by line: each hand-off gives
// the candidate the next token, the old leader's late write is refused,
// and the observer sees the last leader.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := regexp.MustCompile(`(?m)^\[ *\d+ms\] `).ReplaceAllString(out.String(), "")
	for _, want := range []string{
		"replica-a leads with token 1\n",
		"replica-a handed the lease off to replica-b\n",
		"replica-b leads with token 2, ",
		"replica-a's late write was refused: fence: resource \"reports\": token 1 of lease \"reports/leader\" is stale: the fence has accepted token 2\n",
		"replica-b saw replica-c preferred and handed the lease off to it\n",
		"replica-c leads with token 3\n",
		"observer: initial: replica-a leads with token 1\n",
		"observer: acquired: replica-c leads with token 3\n",
		"replica-c released the lease; the last report: unit ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
