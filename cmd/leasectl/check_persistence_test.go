package main_test

import (
	"strings"
	"testing"

	"github.com/golib/lease/internal/testkit/testserver"
)

// TestValkeyCheckPersistence runs check against real servers with
// appendonly no and yes: without the append-only file check says what a
// restart costs, as advice (exit status 0); with it, nothing.
func TestValkeyCheckPersistence(t *testing.T) {
	t.Parallel()
	off := testserver.StartValkey(t, testserver.ValkeyOptions{ExtraArgs: []string{"--appendonly", "no"}})
	run(t, nil, "--valkey", off.Addr(), "check").want(t, 0, "ok: no problem found",
		"advice:  "+off.Addr()+": appendonly is no", "a restart frees every lease at once", "fenced writes stay safe",
		"two processes may both believe they hold a lease", "docs/valkey-quickstart.md")
	r := run(t, nil, "--valkey", off.Addr(), "check", "--json")
	r.want(t, 0, `"ok":true`, "appendonly is no")

	on := testserver.StartValkey(t, testserver.ValkeyOptions{AppendOnly: true})
	r = run(t, nil, "--valkey", on.Addr(), "check")
	r.want(t, 0, "ok: no problem found")
	if strings.Contains(r.stdout, "appendonly") {
		t.Fatalf("check with appendonly yes mentions it:\n%s", r.stdout)
	}
}
