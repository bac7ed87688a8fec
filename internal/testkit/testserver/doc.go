// Package testserver starts throwaway Valkey and PostgreSQL servers for tests,
// or points tests at servers that are already running.
//
// Backend tests in this module run against real servers, never mocks. This
// package finds the server binaries on the machine, starts them on free
// loopback ports with their data in a temporary directory, waits until they
// answer, and stops them and deletes their data afterwards.
//
// # Shared and dedicated servers
//
// [Valkey], [ValkeyCluster] and [Postgres] return a server shared by every test
// in the test binary (one Go package). It is started on first use and stopped
// by [Main] when the tests are done. Tests that share a server must not change
// its configuration or stop it, and must keep their data apart: unique key
// prefixes on Valkey, and a database of their own on PostgreSQL from
// [SharedPostgres.NewDatabase].
//
// [StartValkey], [StartValkeyCluster] and [StartPostgres] start a dedicated
// server for one test, stopped when that test ends. Their methods inject faults
// on the real process: stop, kill -9, restart on the same port and data, pause
// with SIGSTOP and resume with SIGCONT.
// [PostgresServer.StartReplica] adds an asynchronous streaming replica of a
// dedicated PostgreSQL server, which [PostgresServer.Promote] turns into a
// primary: a failover. [PgBouncer] puts a PgBouncer in front of a database, in
// the pool mode a test asks for.
//
// # TestMain
//
// A package that uses the shared servers runs its tests through [Main]:
//
//	func TestMain(m *testing.M) {
//		os.Exit(testserver.Main(m))
//	}
//
// or through [MainLeakChecked], which then checks with goleak that the tests
// left no goroutine running.
//
// # Environment
//
//   - LEASE_VALKEY_ADDR=host:port makes [Valkey] return that server instead of
//     starting one. Dedicated servers and clusters are still started locally.
//   - LEASE_POSTGRES_URL=postgres://user@host:port/db makes [Postgres] return that
//     server; [SharedPostgres.NewDatabase] creates databases on it, so the user
//     needs the CREATEDB privilege.
//   - LEASE_PG_BIN=dir names the directory holding initdb and postgres. Without
//     it the newest /usr/lib/postgresql/*/bin is used, then PATH.
//   - LEASE_REQUIRE_SERVERS=1 makes a test fail, with the reason and the tail of
//     the server's log, when a server it needs can't be started or reached.
//     Without it such a test is skipped with a message saying how to run it.
//     `make test` sets it, so CI never passes by skipping.
//
// valkey-server is looked up on PATH. When the tests run as root, PostgreSQL
// runs as the postgres user (it refuses to run as root) with its directory
// handed to that user.
//
// # Leftovers
//
// Servers are started with the parent-death signal set to SIGKILL, so they die
// with a test binary that is killed or times out. Their directories live in
// [os.TempDir] under names that carry the test binary's process ID; [Main]
// deletes those left behind by test binaries that no longer run. Ports are
// picked fresh each time, and a start that loses its port to another process is
// retried on a new one.
package testserver
