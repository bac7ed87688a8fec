package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestQuickstartRejectsTheStaleWrite(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, 200*time.Millisecond); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	// Drop the timestamps; check the story line by line.
	got := regexp.MustCompile(`(?m)^\[ *\d+ms\] `).ReplaceAllString(out.String(), "")
	for _, want := range []string{
		"worker-a acquired the lease with token 1 (TTL 200ms)\n",
		"worker-a wrote with token 1: accepted\n",
		"worker-a is paused for 300ms, longer than its TTL\n",
		"worker-b acquired the expired lease with token 2\n",
		"worker-b wrote with token 2: accepted\n",
		"worker-a wakes up; its local deadline passed",
		"worker-a's write was rejected: stale token 1: the store already accepted token 2\n",
		`worker-a's release failed too: lease: release "invoices/2026-11": token 1 lost: superseded` + "\n",
		"worker-b released the lease\n",
		"final value: total=250 (by worker-b)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
