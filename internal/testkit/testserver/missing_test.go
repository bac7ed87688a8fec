package testserver_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestMissingServers runs this package's server tests in a child test binary
// that can find no server: they must all skip with directions, or all fail
// with LEASE_REQUIRE_SERVERS=1.
func TestMissingServers(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const serverTests = "^(TestSharedValkey|TestValkeyPauseResume|TestStartValkeyCluster|TestSharedValkeyCluster|" +
		"TestSharedPostgres|TestPostgresStopImmediateStart|TestPostgresStopFastStart|TestPostgresKillStart)$"
	nowhere := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASE_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+nowhere, "LEASE_PG_BIN="+nowhere)

	for _, require := range []string{"", "1"} {
		t.Run("LEASE_REQUIRE_SERVERS="+require, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(exe, "-test.run="+serverTests, "-test.v", "-test.count=1")
			cmd.Env = slices.Concat(env, []string{"LEASE_REQUIRE_SERVERS=" + require})
			out, err := cmd.CombinedOutput()
			output := string(out)
			if require == "" {
				if err != nil {
					t.Fatalf("child tests failed (%v); want them skipped:\n%s", err, output)
				}
				for _, want := range []string{"--- SKIP: TestSharedValkey", "--- SKIP: TestSharedPostgres",
					"--- SKIP: TestStartValkeyCluster", "valkey-server not found", "LEASE_PG_BIN=" + nowhere,
					"make test", "LEASE_VALKEY_ADDR=", "LEASE_POSTGRES_URL="} {
					if !strings.Contains(output, want) {
						t.Errorf("child output lacks %q:\n%s", want, output)
					}
				}
				if strings.Contains(output, "--- PASS") {
					t.Errorf("a server test passed without servers:\n%s", output)
				}
				return
			}
			if err == nil {
				t.Fatalf("child tests passed; want them failed:\n%s", output)
			}
			for _, want := range []string{"--- FAIL: TestSharedValkey", "--- FAIL: TestSharedPostgres",
				"--- FAIL: TestPostgresStopImmediateStart", "--- FAIL: TestPostgresKillStart", "LEASE_REQUIRE_SERVERS=1"} {
				if !strings.Contains(output, want) {
					t.Errorf("child output lacks %q:\n%s", want, output)
				}
			}
			if strings.Contains(output, "--- SKIP") {
				t.Errorf("a server test skipped with LEASE_REQUIRE_SERVERS=1:\n%s", output)
			}
		})
	}
}
