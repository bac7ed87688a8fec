package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/testserver"
	"github.com/golib/lease/internal/valkeyacl"
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

// TestRunAsTheDocumentedUser runs the example as a user with exactly the
// ACL rule the quickstart gives, and checks that the rule refuses what
// would reach other tenants' data.
func TestRunAsTheDocumentedUser(t *testing.T) {
	for _, doc := range []string{"options.go", "../../docs/valkey-quickstart.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(text)), " "), "ACL SETUSER reports "+valkeyacl.Quickstart) {
			t.Errorf("%s does not give the rule ACL SETUSER reports %s", doc, valkeyacl.Quickstart)
		}
	}
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	admin, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	user := valkeyacl.Login(t, admin, srv.Addr(), "reports", valkeyacl.Quickstart)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The second run comes after the server forgot the scripts (a restart,
	// a failover): the calls fall back to EVAL and EVAL_RO.
	for round := range 2 {
		if round == 1 {
			if err := admin.Do(ctx, admin.B().ScriptFlush().Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		var out bytes.Buffer
		if err := run(ctx, config{addr: srv.Addr(), user: "reports", password: "secret"}, &out); err != nil {
			t.Fatalf("run as the ACL user: %v\n%s", err, out.String())
		}
	}
	// The example never waits for a held lease, which watches the
	// release channel.
	valkeyacl.CheckAllUsed(t, admin, valkeyacl.Quickstart, "ssubscribe", "sunsubscribe")
	valkeyacl.CheckForbidden(t, admin, user, "other:{reports/daily}")
}
