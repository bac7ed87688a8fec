package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// SharedPostgres is the PostgreSQL server shared by the tests of a package:
// the one LEASE_POSTGRES_URL names, or one this package started.
type SharedPostgres struct {
	url string
}

var postgresShared lazy[*SharedPostgres]

// Postgres returns the package's shared PostgreSQL server, starting it on first
// use. [Main] stops it after the tests. If LEASE_POSTGRES_URL is set, that
// server is used and nothing is started.
//
// When no server can be had, Postgres skips the test, or fails it if
// LEASE_REQUIRE_SERVERS=1. It fails the test if TestMain doesn't call [Main].
// It is safe for concurrent use.
func Postgres(t testing.TB) *SharedPostgres {
	t.Helper()
	needMain(t)
	p, err := postgresShared.get(startSharedPostgres)
	if err != nil {
		unavailable(t, "no shared PostgreSQL server", err)
	}
	return p
}

// URL returns the URL of the server's default database, as a superuser (or
// as the user of LEASE_POSTGRES_URL). Tests that write should use their own
// database from [SharedPostgres.NewDatabase].
func (p *SharedPostgres) URL() string { return p.url }

// NewDatabase creates an empty database for t and returns its URL. The
// database is named after the test and dropped, with any connections still
// open to it, when t ends. It fails the test if the database can't be
// created.
func (p *SharedPostgres) NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, p.url, true)
}

func startSharedPostgres() (*SharedPostgres, error) {
	if raw := os.Getenv(envPostgresURL); raw != "" {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return nil, fmt.Errorf("%s must be a postgres:// URL", envPostgresURL)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := pingPostgres(ctx, raw); err != nil {
			return nil, fmt.Errorf("%s (%s): %w", envPostgresURL, u.Redacted(), err)
		}
		return &SharedPostgres{url: raw}, nil
	}
	pp, err := startPostgresProc(false, nil, nil)
	if err != nil {
		return nil, err
	}
	onStopShared(pp.close)
	return &SharedPostgres{url: pp.url()}, nil
}

// PostgresServer is a dedicated PostgreSQL server for one test, which can
// inject faults on it. Its methods report failures through the test that
// started it and must be called from that test's goroutine.
type PostgresServer struct {
	t  testing.TB
	pp *pgProc
	// primary is the server a replica streams from; nil for a primary,
	// and once the replica was promoted.
	primary *pgProc
}

// StartPostgres starts a dedicated PostgreSQL server, stopped and deleted when
// t ends. It needs the server binaries, also when LEASE_POSTGRES_URL is set.
// Unlike the shared server it runs with synchronous_commit on, so a committed
// transaction survives [PostgresServer.StopImmediate]; with fsync off, it
// would not survive a crash of the machine.
//
// When the server can't be started, StartPostgres skips the test, or fails it
// if LEASE_REQUIRE_SERVERS=1.
func StartPostgres(t testing.TB) *PostgresServer {
	t.Helper()
	return StartPostgresWith(t, PostgresOptions{})
}

// PostgresOptions configures a dedicated server from [StartPostgresWith].
type PostgresOptions struct {
	// Env is added to the environment of the server's processes,
	// "NAME=value" each: a preloaded library that fakes the server's
	// clock, for instance. Files it names must be readable by the
	// postgres user when the tests run as root.
	Env []string
	// Settings are server settings, "name=value" each, passed with -c
	// after the harness's own, so they override them: "fsync=on",
	// "full_page_writes=on" for a server that survives a crash of the
	// machine, as a benchmark of a durable configuration needs. Without
	// them the server runs as [StartPostgres] describes.
	Settings []string
}

// StartPostgresWith is [StartPostgres] with options.
func StartPostgresWith(t testing.TB, opts PostgresOptions) *PostgresServer {
	t.Helper()
	for _, kv := range opts.Settings {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			t.Fatalf("testserver: PostgreSQL setting %q is not name=value", kv)
		}
	}
	pp, err := startPostgresProc(true, slices.Clone(opts.Env), slices.Clone(opts.Settings))
	if err != nil {
		unavailable(t, "can't start a dedicated PostgreSQL server", dedicatedErr(err, envPostgresURL))
	}
	t.Cleanup(pp.close)
	return &PostgresServer{t: t, pp: pp}
}

// URL returns the URL of the server's default database as the superuser
// postgres. It stays the same across restarts.
func (s *PostgresServer) URL() string { return s.pp.url() }

// Addr returns the server's address as host:port. It stays the same
// across restarts.
func (s *PostgresServer) Addr() string { return s.pp.hostPort() }

// DatabaseURL returns dbURL, the URL of a database of another server (a
// replica's primary, say), pointed at this server's host and port, with
// the same user, database and parameters.
func (s *PostgresServer) DatabaseURL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		s.t.Fatalf("testserver: DatabaseURL(%q): %v", dbURL, err)
	}
	u.Host = s.Addr()
	return u.String()
}

// NewDatabase creates an empty database named after t and returns its URL. It
// goes when the server does, at the end of the test that started it. It fails
// the test if the database can't be created.
func (s *PostgresServer) NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, s.pp.url(), false)
}

// PID returns the process ID of the running postmaster, or 0 if it isn't
// running.
func (s *PostgresServer) PID() int {
	if !s.pp.proc.running() {
		return 0
	}
	_, pid := s.pp.proc.exited()
	return pid
}

// StopImmediate stops the server the way `pg_ctl stop -m immediate` does
// (SIGQUIT to the postmaster): every connection is cut without a checkpoint,
// and the next [PostgresServer.Start] recovers from the WAL, like after a
// crash. It waits for the server to exit, and does nothing if it isn't
// running.
func (s *PostgresServer) StopImmediate() {
	s.t.Helper()
	if err := s.pp.proc.stop(syscall.SIGQUIT); err != nil {
		s.t.Fatalf("testserver: stop postgres at %s: %v", s.pp.hostPort(), err)
	}
}

// Stop shuts the server down the way `pg_ctl stop -m fast` does (SIGINT to
// the postmaster): connections are cut, a checkpoint is written, and the
// next [PostgresServer.Start] needs no recovery. It waits for the server to
// exit, and does nothing if it isn't running.
func (s *PostgresServer) Stop() {
	s.t.Helper()
	if err := s.pp.proc.stop(syscall.SIGINT); err != nil {
		s.t.Fatalf("testserver: stop postgres at %s: %v", s.pp.hostPort(), err)
	}
}

// Kill kills the postmaster and every server process with SIGKILL, as a
// crash of the machine's processes would: nothing is flushed, and the next
// [PostgresServer.Start] recovers from the WAL. It waits for the
// postmaster to exit, and does nothing if it isn't running.
func (s *PostgresServer) Kill() {
	s.t.Helper()
	s.pp.proc.kill()
}

// Start starts a stopped server again on the same port with the same data,
// and waits until it accepts connections. It fails the test if the server is
// running.
func (s *PostgresServer) Start() {
	s.t.Helper()
	if s.pp.proc.running() {
		s.t.Fatalf("testserver: start postgres at %s: it is running", s.pp.hostPort())
	}
	if err := s.pp.start(); err != nil {
		s.pp.proc.kill()
		s.t.Fatalf("testserver: start postgres at %s: %v", s.pp.hostPort(), err)
	}
}

// Pause stops the postmaster and every server process it started with
// SIGSTOP: connections stay open, queries and new connections wait (and time
// out) until [PostgresServer.Resume].
func (s *PostgresServer) Pause() {
	s.t.Helper()
	if err := s.pp.proc.pause(); err != nil {
		s.t.Fatalf("testserver: pause postgres at %s: %v", s.pp.hostPort(), err)
	}
}

// Resume continues a server stopped by [PostgresServer.Pause] with SIGCONT.
func (s *PostgresServer) Resume() {
	s.t.Helper()
	if err := s.pp.proc.resume(); err != nil {
		s.t.Fatalf("testserver: resume postgres at %s: %v", s.pp.hostPort(), err)
	}
}

// ReplicaOptions configures a replica from [PostgresServer.StartReplica].
// The zero value streams straight from the primary.
type ReplicaOptions struct {
	// Via is the address (host:port) at which the replica reaches its
	// primary, for the base backup and then for streaming: a proxy in
	// front of the primary, which a test can cut so that the replica
	// misses writes. Default the primary's own address.
	Via string
}

// StartReplica starts a physical streaming replica of s, a dedicated server
// stopped and deleted when t ends. Its cluster is a base backup of s
// (pg_basebackup -R, run as the user that runs s), and it runs as a hot
// standby: it streams s's write-ahead log asynchronously, answers reads and
// refuses writes. It has the settings and environment of s, on a port of
// its own. s must be a running primary; the harness's servers need no
// setting for it, since wal_level=replica, max_wal_senders=10 and pg_hba
// entries that trust replication connections from loopback are the
// defaults of PostgreSQL and initdb.
//
// [PostgresServer.CatchUp] waits until the replica has what s committed,
// and [PostgresServer.Promote] makes it a primary. It fails the test if s
// isn't a primary, and skips or fails it as [StartPostgres] does if the
// replica can't be started.
func (s *PostgresServer) StartReplica(t testing.TB, opts ReplicaOptions) *PostgresServer {
	t.Helper()
	if s.primary != nil {
		t.Fatalf("testserver: replica of postgres at %s: it is a replica itself", s.pp.hostPort())
	}
	via := opts.Via
	if via == "" {
		via = s.pp.hostPort()
	}
	pp, err := startReplicaProc(s.pp, via)
	if err != nil {
		unavailable(t, "can't start a PostgreSQL replica", dedicatedErr(err, envPostgresURL))
	}
	t.Cleanup(pp.close)
	return &PostgresServer{t: t, pp: pp, primary: s.pp}
}

// CatchUp waits until the replica s has replayed its primary's write-ahead
// log up to where the primary had flushed it when CatchUp was called
// (pg_current_wal_flush_lsn() there, pg_last_wal_replay_lsn() here): every
// transaction whose commit was flushed before the call, so with
// synchronous_commit on every acknowledged commit, is then visible on the
// replica. It fails the test if s is not a replica, or if it has not caught
// up within 30s (its link to the primary cut, the primary down).
func (s *PostgresServer) CatchUp() {
	s.t.Helper()
	if s.primary == nil {
		s.t.Fatalf("testserver: catch up postgres at %s: it is not a replica", s.pp.hostPort())
	}
	if err := catchUp(s.primary.url(), s.pp.url()); err != nil {
		s.t.Fatalf("testserver: catch up postgres at %s with %s: %v", s.pp.hostPort(), s.primary.hostPort(), err)
	}
}

func catchUp(primaryURL, replicaURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var lsn string
	if err := queryPostgres(ctx, primaryURL, "SELECT pg_current_wal_flush_lsn()::text", nil, &lsn); err != nil {
		return fmt.Errorf("primary's WAL position: %w", err)
	}
	for {
		var replayed bool
		err := queryPostgres(ctx, replicaURL, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", []any{lsn}, &replayed)
		if err == nil && replayed {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("WAL not replayed up to %s within %v (last error: %v)", lsn, readyTimeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// Promote makes the replica s a primary, as `pg_ctl promote` does (SELECT
// pg_promote(): recovery ends and a new timeline begins), and waits until it
// accepts writes. Its old primary, if it still runs, goes on as a primary of
// its own: stop or kill it first for a failover. It fails the test if s is
// not a replica or is not promoted within 30s.
func (s *PostgresServer) Promote() {
	s.t.Helper()
	if s.primary == nil {
		s.t.Fatalf("testserver: promote postgres at %s: it is not a replica", s.pp.hostPort())
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var promoted bool
	err := queryPostgres(ctx, s.pp.url(), "SELECT pg_promote(true, $1)", []any{int(readyTimeout / time.Second)}, &promoted)
	if err == nil && !promoted {
		err = fmt.Errorf("not promoted within %v%s", readyTimeout, logTail(s.pp.proc.logPath))
	}
	if err != nil {
		s.t.Fatalf("testserver: promote postgres at %s: %v", s.pp.hostPort(), err)
	}
	s.primary = nil
}

// pgBinaries is the directory holding initdb and postgres.
type pgBinaries struct {
	dir string
}

var pgBin lazy[pgBinaries]

// findPostgres looks for the server binaries in LEASE_PG_BIN, then in the
// newest /usr/lib/postgresql/*/bin (Debian's layout), then on PATH.
func findPostgres() (pgBinaries, error) {
	if dir := os.Getenv(envPGBin); dir != "" {
		if err := hasPGBinaries(dir); err != nil {
			return pgBinaries{}, fmt.Errorf("%s=%s: %w", envPGBin, dir, err)
		}
		return pgBinaries{dir: dir}, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, dir := range dirs {
		if hasPGBinaries(dir) == nil {
			return pgBinaries{dir: dir}, nil
		}
	}
	if path, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(path)
		if hasPGBinaries(dir) == nil {
			return pgBinaries{dir: dir}, nil
		}
	}
	return pgBinaries{}, fmt.Errorf("PostgreSQL server binaries (initdb, postgres) not found in $%s, /usr/lib/postgresql/*/bin or PATH", envPGBin)
}

func hasPGBinaries(dir string) error {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s is not executable", filepath.Join(dir, name))
		}
	}
	return nil
}

// pgCredential returns who runs the server: nil for the current user, or the
// postgres user when the tests run as root, which PostgreSQL refuses to be.
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, which PostgreSQL refuses, and no postgres user to run it as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("postgres user: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// pgProc is one PostgreSQL server this package started, with its directory:
// the cluster in data/, the socket and the log beside it.
type pgProc struct {
	proc *process
	dir  string
	port int
	cfg  pgConfig
}

// pgConfig says how to run a server, and so how to run a replica of it.
type pgConfig struct {
	bin  pgBinaries
	cred *syscall.Credential // nil runs as the current user
	// Without syncCommit, a commit returns before its WAL is written, so a
	// crash can lose it.
	syncCommit bool
	env        []string
	settings   []string
}

// startPostgresProc creates a cluster with initdb in a new directory, starts
// a server on it and waits until it accepts connections.
func startPostgresProc(syncCommit bool, env, settings []string) (*pgProc, error) {
	bin, err := pgBin.get(findPostgres)
	if err != nil {
		return nil, err
	}
	cred, err := pgCredential()
	if err != nil {
		return nil, err
	}
	cfg := pgConfig{bin: bin, cred: cred, syncCommit: syncCommit, env: env, settings: settings}
	return newPostgresDir(cfg, func(dir string) error {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		return run(ctx, filepath.Join(dir, "postgres.log"), dir, cred, filepath.Join(bin.dir, "initdb"),
			"-D", filepath.Join(dir, "data"), "--auth=trust", "--username=postgres", "--encoding=UTF8", "--locale=C", "--no-sync")
	})
}

// newPostgresDir creates a directory for a server run as cfg says, has
// create fill its data/ with a cluster, and starts a server on it. The
// directory is deleted if that fails.
func newPostgresDir(cfg pgConfig, create func(dir string) error) (*pgProc, error) {
	dir, err := makeDir("postgres")
	if err != nil {
		return nil, err
	}
	pp, err := initPostgres(cfg, dir, create)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return pp, nil
}

func initPostgres(cfg pgConfig, dir string, create func(dir string) error) (*pgProc, error) {
	if cfg.cred != nil {
		if err := os.Chown(dir, int(cfg.cred.Uid), int(cfg.cred.Gid)); err != nil {
			return nil, err
		}
	}
	if err := create(dir); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "postgres.log")
	data := filepath.Join(dir, "data")
	var err error
	for range maxPortTries {
		pp := &pgProc{dir: dir, cfg: cfg}
		if pp.port, err = freePort(); err != nil {
			return nil, err
		}
		args := []string{
			"-D", data,
			"-p", strconv.Itoa(pp.port),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=" + dir,
			"-c", "max_connections=200",
			"-c", "fsync=off",
			"-c", "synchronous_commit=" + onOff(cfg.syncCommit),
			"-c", "full_page_writes=off",
			"-c", "logging_collector=off",
		}
		for _, kv := range cfg.settings {
			args = append(args, "-c", kv)
		}
		pp.proc = &process{
			name:    "postgres",
			path:    filepath.Join(cfg.bin.dir, "postgres"),
			args:    args,
			dir:     dir,
			logPath: logPath,
			cred:    cfg.cred,
			env:     cfg.env,
		}
		if err = pp.start(); err == nil {
			return pp, nil
		}
		pp.proc.kill()
		if !pp.proc.lostPort() {
			return nil, err
		}
	}
	return nil, err
}

// startReplicaProc starts a physical streaming replica of primary, run as
// primary is: pg_basebackup copies primary's cluster through via
// (host:port) into a new directory and, with -R, writes standby.signal and
// a primary_conninfo that streams from via.
func startReplicaProc(primary *pgProc, via string) (*pgProc, error) {
	host, port, err := net.SplitHostPort(via)
	if err != nil {
		return nil, fmt.Errorf("replica of %s via %q: %w", primary.hostPort(), via, err)
	}
	cfg := primary.cfg
	return newPostgresDir(cfg, func(dir string) error {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		// -c fast: a spread checkpoint on the primary would hold the
		// backup up for minutes. -X stream: the WAL written meanwhile
		// comes along, over a temporary replication slot.
		return run(ctx, filepath.Join(dir, "postgres.log"), dir, cfg.cred, filepath.Join(cfg.bin.dir, "pg_basebackup"),
			"-D", filepath.Join(dir, "data"), "-h", host, "-p", port, "-U", "postgres",
			"-R", "-X", "stream", "-c", "fast", "--no-sync")
	})
}

func (pp *pgProc) hostPort() string { return "127.0.0.1:" + strconv.Itoa(pp.port) }

func (pp *pgProc) url() string {
	return "postgres://postgres@" + pp.hostPort() + "/postgres?sslmode=disable"
}

// start starts the server and waits until it accepts connections.
func (pp *pgProc) start() error {
	if err := pp.proc.start(); err != nil {
		return err
	}
	return pp.proc.waitReady(func(ctx context.Context) error { return pingPostgres(ctx, pp.url()) })
}

// close stops the server at once and deletes its directory.
func (pp *pgProc) close() {
	_ = pp.proc.stop(syscall.SIGQUIT)
	_ = os.RemoveAll(pp.dir)
}

// pingPostgres returns nil if the server at url accepts a connection and
// answers a ping.
func pingPostgres(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

// dbSeq numbers the databases this test binary creates.
var dbSeq atomic.Int64

// newDatabase creates a database named after t on the server at adminURL and
// returns its URL; with drop, it drops it when t ends.
func newDatabase(t testing.TB, adminURL string, drop bool) string {
	t.Helper()
	name := databaseName(t.Name(), os.Getpid(), dbSeq.Add(1))
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatalf("testserver: new database: bad server URL: %v", err)
	}
	u.Path = "/" + name
	ident := pgx.Identifier{name}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := execPostgres(ctx, adminURL, "CREATE DATABASE "+ident); err != nil {
		t.Fatalf("testserver: create database %s: %v", name, err)
	}
	if drop {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
			defer cancel()
			if err := execPostgres(ctx, adminURL, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
				t.Errorf("testserver: drop database %s: %v", name, err)
			}
		})
	}
	return u.String()
}

// queryPostgres runs a query with args that returns one row on the server
// at url and scans the row into dest.
func queryPostgres(ctx context.Context, url, sql string, args []any, dest ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, sql, args...).Scan(dest...)
}

func execPostgres(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// databaseName makes a database name from a test's name that is valid,
// lower case, at most 63 bytes, and unique across test binaries that share a
// server (pid) and within one (seq).
func databaseName(testName string, pid int, seq int64) string {
	var b strings.Builder
	underscore := true // don't start with one
	for _, r := range strings.ToLower(testName) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			underscore = false
		} else if !underscore {
			b.WriteByte('_')
			underscore = true
		}
	}
	base := strings.TrimSuffix(b.String(), "_")
	const maxBase = 40
	if len(base) > maxBase {
		base = strings.TrimSuffix(base[:maxBase], "_")
	}
	return fmt.Sprintf("test_%s_%d_%d", base, pid, seq)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
