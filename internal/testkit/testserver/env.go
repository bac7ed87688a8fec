package testserver

import (
	"fmt"
	"os"
	"testing"
)

// The environment variables this package reads; the package doc describes them.
const (
	envValkeyAddr     = "LEASE_VALKEY_ADDR"
	envPostgresURL    = "LEASE_POSTGRES_URL"
	envPGBin          = "LEASE_PG_BIN"
	envRequireServers = "LEASE_REQUIRE_SERVERS"
)

// howToRun is appended to every skip message.
const howToRun = "run `make test` (installs and starts the servers), or point the tests at running servers with " +
	envValkeyAddr + "=host:port and " + envPostgresURL + "=postgres://user@host:port/db"

// serversRequired reports whether a missing server fails the test instead of
// skipping it.
func serversRequired() bool {
	return os.Getenv(envRequireServers) == "1"
}

// unavailable ends t because the server described by what can't be had: it
// fails the test when servers are required and skips it otherwise. err says
// why, including the tail of the server's log when there is one.
func unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if serversRequired() {
		t.Fatalf("testserver: %s: %v\n(%s=1, so a missing server fails the test)", what, err, envRequireServers)
		return
	}
	t.Skipf("testserver: skipping, %s: %v\nTo run this test, %s.", what, err, howToRun)
}

// needMain fails t if the test binary's TestMain doesn't run [Main], which is
// what stops the shared servers.
func needMain(t testing.TB) {
	t.Helper()
	if !mainRunning.Load() {
		t.Fatalf("testserver: shared servers need the package's TestMain to run its tests through testserver.Main:\n" +
			"\tfunc TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }")
	}
}

// dedicatedErr adds to err, from starting a dedicated server, that the server
// named by env can't stand in for it.
func dedicatedErr(err error, env string) error {
	if os.Getenv(env) == "" {
		return err
	}
	return fmt.Errorf("%w (%s is set, but a dedicated server is started here, to be killed or paused)", err, env)
}
