package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/testkit/valkeyacl"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

func newClient(t *testing.T, addr string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestRun runs the example against the harness's server, twice: the second
// run gets a higher token and its fenced write is accepted too.
func TestRun(t *testing.T) {
	addr := testserver.Valkey(t).Addr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		var out bytes.Buffer
		if err := run(ctx, valkey.ClientOption{InitAddress: []string{addr}}, &out); err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
		for _, want := range []string{"acquired \"reports/daily\" with token", "wrote the report under token", "released; shutting down"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
	}
	c := newClient(t, addr)
	if got, err := c.Do(ctx, c.B().Get().Key("report:{reports/daily}").Build()).ToString(); err != nil || got != "report body" {
		t.Fatalf("the report is %q, %v; want \"report body\"", got, err)
	}
}

// TestStaleWriteIsRefused: after a run, a write with a token below the
// run's is refused, and leaves the report as it was.
func TestStaleWriteIsRefused(t *testing.T) {
	addr := testserver.Valkey(t).Addr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, valkey.ClientOption{InitAddress: []string{addr}}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, addr)
	// Tokens start at the server's clock in microseconds: the run's was
	// far above 1.
	stale := lease.Snapshot{Key: "reports/daily", Owner: "test", Token: 1, Deadline: time.Now().Add(time.Minute)}
	if err := writeReport(ctx, c, stale, "stale"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("writeReport with token 1 after the run: %v, want fence.ErrStale", err)
	}
	if got, err := c.Do(ctx, c.B().Get().Key("report:{reports/daily}").Build()).ToString(); err != nil || got != "report body" {
		t.Fatalf("the report is %q, %v; want the run's", got, err)
	}
}

func TestWithTLS(t *testing.T) {
	opt, err := withTLS(valkey.ClientOption{}, "")
	if err != nil || opt.TLSConfig == nil || opt.TLSConfig.RootCAs != nil {
		t.Fatalf("withTLS without a CA: %+v, %v; want a TLS config with the system's CAs", opt.TLSConfig, err)
	}
	dir := t.TempDir()
	if _, err := withTLS(valkey.ClientOption{}, filepath.Join(dir, "missing.pem")); err == nil {
		t.Fatal("withTLS with a missing CA file succeeded")
	}
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := withTLS(valkey.ClientOption{}, bad); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("withTLS with a file holding no certificate: %v", err)
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
		opt := withACL(valkey.ClientOption{InitAddress: []string{srv.Addr()}}, "reports", "secret")
		if err := run(ctx, opt, &out); err != nil {
			t.Fatalf("run as the ACL user: %v\n%s", err, out.String())
		}
	}
	// The example never waits for a held lease, which watches the
	// release channel.
	valkeyacl.CheckAllUsed(t, admin, valkeyacl.Quickstart, "ssubscribe", "sunsubscribe")
	valkeyacl.CheckForbidden(t, admin, user, "other:{reports/daily}")
}
