package testserver

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncer starts PgBouncer in front of the database at url (a URL from
// [SharedPostgres.NewDatabase] or [PostgresServer.NewDatabase]), in pool
// mode mode ("session", "transaction" or "statement") with pool size pool
// per database and user, and returns a URL that connects through it. It
// trusts every client, and PgBouncer is stopped when t ends.
//
// It needs the pgbouncer binary (Debian package pgbouncer, which
// scripts/install-deps.sh installs), looked up on PATH and in /usr/sbin;
// without it the test is skipped, or fails if LEASE_REQUIRE_SERVERS=1.
// PgBouncer 1.18, Debian bookworm's, keeps no prepared statements across
// transactions in transaction mode: pgx's default exec mode fails through
// it once two client connections prepare the same statement.
func PgBouncer(t testing.TB, url, mode string, pool int) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
		if _, serr := os.Stat(bin); serr != nil {
			unavailable(t, "pgbouncer not found (scripts/install-deps.sh servers installs it)", err)
		}
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("testserver: PgBouncer: %v", err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("testserver: PgBouncer: %v", err)
	}
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		t.Fatalf("testserver: PgBouncer: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // readable by the postgres user
		t.Fatalf("testserver: PgBouncer: %v", err)
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 100
ignore_startup_parameters = extra_float_digits
`, cfg.Host, cfg.Port, port, filepath.Join(dir, "users.txt"), mode, pool)
	for name, text := range map[string]string{"pgbouncer.ini": ini, "users.txt": `"` + cfg.User + `" ""` + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatalf("testserver: PgBouncer: %v", err)
		}
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if u, err := user.Current(); err == nil && u.Uid == "0" {
		args = append([]string{"-u", "postgres"}, args...) // it refuses to run as root
	}
	cmd := exec.Command(bin, args...)
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("testserver: PgBouncer: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("testserver: pgbouncer did not listen on %s: %s", addr, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", cfg.User, addr, cfg.Database)
}

// syncBuffer is a strings.Builder safe for the writes of a child process's
// output copier and a reader in the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
