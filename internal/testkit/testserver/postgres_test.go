package testserver_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/golib/lease/internal/testkit/testserver"
)

func connect(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func queryString(ctx context.Context, t *testing.T, conn *pgx.Conn, sql string) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func TestSharedPostgres(t *testing.T) {
	t.Parallel()
	pg := testserver.Postgres(t)
	ctx := t.Context()
	conn := connect(ctx, t, pg.URL())
	if got := queryString(ctx, t, conn, "SELECT 1::text"); got != "1" {
		t.Errorf("SELECT 1 = %q", got)
	}
	version := queryString(ctx, t, conn, "SHOW server_version")
	t.Logf("shared PostgreSQL %s", version)
	if os.Getenv("LEASE_POSTGRES_URL") != "" {
		return // not ours: any version, any settings
	}
	if !strings.HasPrefix(version, "15") {
		t.Errorf("server_version = %q; want PostgreSQL 15", version)
	}
	for setting, want := range map[string]string{"fsync": "off", "synchronous_commit": "off", "max_connections": "200"} {
		if got := queryString(ctx, t, conn, "SHOW "+setting); got != want {
			t.Errorf("%s = %q; want %q", setting, got, want)
		}
	}
}

func TestSharedPostgresNewDatabase(t *testing.T) {
	t.Parallel()
	pg := testserver.Postgres(t)
	ctx := t.Context()
	var names []string
	for range 2 {
		conn := connect(ctx, t, pg.NewDatabase(t))
		names = append(names, queryString(ctx, t, conn, "SELECT current_database()"))
		if _, err := conn.Exec(ctx, "CREATE TABLE t (id int)"); err != nil {
			t.Fatalf("CREATE TABLE: %v", err)
		}
	}
	if names[0] == names[1] || !strings.Contains(names[0], "newdatabase") {
		t.Errorf("databases %q: want two, named after the test", names)
	}

	// The databases are dropped when the test ends, even with open connections.
	t.Run("dropped", func(t *testing.T) {
		var name string
		t.Run("create", func(t *testing.T) {
			conn := connect(ctx, t, pg.NewDatabase(t))
			name = queryString(ctx, t, conn, "SELECT current_database()")
		})
		admin := connect(ctx, t, pg.URL())
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil || n != 0 {
			t.Errorf("database %s after its test: count %d, %v; want dropped", name, n, err)
		}
	})
}

// TestPostgresStopImmediateStart, TestPostgresStopFastStart and
// TestPostgresKillStart stop the server in each way the harness offers and
// start it again: committed data survives each, and the connections are
// cut.
func TestPostgresStopImmediateStart(t *testing.T) {
	stopAndStart(t, (*testserver.PostgresServer).StopImmediate)
}

func TestPostgresStopFastStart(t *testing.T) { stopAndStart(t, (*testserver.PostgresServer).Stop) }

func TestPostgresKillStart(t *testing.T) { stopAndStart(t, (*testserver.PostgresServer).Kill) }

func stopAndStart(t *testing.T, stop func(*testserver.PostgresServer)) {
	t.Parallel()
	srv := testserver.StartPostgres(t)
	ctx := t.Context()
	url := srv.NewDatabase(t)
	conn := connect(ctx, t, url)
	t.Logf("dedicated PostgreSQL %s at %s, pid %d", queryString(ctx, t, conn, "SHOW server_version"), srv.URL(), srv.PID())
	if _, err := conn.Exec(ctx, "CREATE TABLE kv (k text PRIMARY KEY, v text); INSERT INTO kv VALUES ('a', 'committed')"); err != nil {
		t.Fatalf("write: %v", err)
	}

	pid := srv.PID()
	stop(srv)
	if srv.PID() != 0 {
		t.Errorf("PID after the stop = %d; want 0", srv.PID())
	}
	if err := conn.Ping(ctx); err == nil {
		t.Errorf("Ping after the stop succeeded; want the connection cut")
	}
	srv.Start()
	if got := srv.PID(); got == 0 || got == pid {
		t.Errorf("PID after Start = %d; want a new postmaster (was %d)", got, pid)
	}
	conn = connect(ctx, t, url)
	if got := queryString(ctx, t, conn, "SELECT v FROM kv WHERE k = 'a'"); got != "committed" {
		t.Errorf("after the stop and Start: v = %q; want the committed row", got)
	}
}

func TestPostgresPauseResume(t *testing.T) {
	t.Parallel()
	srv := testserver.StartPostgres(t)
	ctx := t.Context()
	conn := connect(ctx, t, srv.URL())

	srv.Pause()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := conn.Ping(short)
	cancel()
	if err == nil {
		t.Errorf("Ping to a paused server succeeded")
	}
	short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = pgx.Connect(short, srv.URL())
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("connect to a paused server: %v; want %v", err, context.DeadlineExceeded)
	}

	srv.Resume()
	conn = connect(ctx, t, srv.URL())
	if err := conn.Ping(ctx); err != nil {
		t.Errorf("Ping after Resume: %v", err)
	}
}

// TestStartPostgresWithSettings checks that Settings override the harness's
// defaults and that a server without them keeps those defaults.
func TestStartPostgresWithSettings(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	durable := testserver.StartPostgresWith(t, testserver.PostgresOptions{
		Settings: []string{"fsync=on", "full_page_writes=on", "synchronous_commit=on"},
	})
	plain := testserver.StartPostgres(t)
	for _, c := range []struct {
		name string
		url  string
		want map[string]string
	}{
		{"with Settings", durable.URL(), map[string]string{"fsync": "on", "full_page_writes": "on", "synchronous_commit": "on"}},
		{"without", plain.URL(), map[string]string{"fsync": "off", "full_page_writes": "off", "synchronous_commit": "on"}},
	} {
		conn := connect(ctx, t, c.url)
		for setting, want := range c.want {
			if got := queryString(ctx, t, conn, "SHOW "+setting); got != want {
				t.Errorf("%s: %s = %q; want %q", c.name, setting, got, want)
			}
		}
	}
}

// TestPostgresReplica fails a database over to its replica and builds a
// replica of the promoted server, as the failover row of internal/testkit/chaos
// does: the replica streams through Via, refuses writes, and has every
// commit CatchUp waited for; promoted once the primary is killed, it
// accepts writes, and a replica of it follows it.
func TestPostgresReplica(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary := testserver.StartPostgres(t)
	url := primary.NewDatabase(t)
	conn := connect(ctx, t, url)
	mustExec(ctx, t, conn, "CREATE TABLE kv (k text PRIMARY KEY, v text); INSERT INTO kv VALUES ('a', 'in the backup')")

	via := forward(t, primary.Addr())
	replica := primary.StartReplica(t, testserver.ReplicaOptions{Via: via})
	mustExec(ctx, t, conn, "INSERT INTO kv VALUES ('b', 'streamed')")
	replica.CatchUp()
	rconn := connect(ctx, t, replica.DatabaseURL(url))
	if got := queryString(ctx, t, rconn, "SELECT pg_is_in_recovery()::text"); got != "true" {
		t.Errorf("replica: pg_is_in_recovery() = %s; want true", got)
	}
	_, port, _ := strings.Cut(via, ":")
	if got := queryString(ctx, t, rconn, "SHOW primary_conninfo"); !strings.Contains(got, "port="+port) {
		t.Errorf("replica: primary_conninfo = %q; want it through Via (%s)", got, via)
	}
	if got := queryString(ctx, t, conn, "SELECT string_agg(sync_state, ',') FROM pg_stat_replication"); got != "async" {
		t.Errorf("primary: pg_stat_replication.sync_state = %q; want one asynchronous replica", got)
	}
	if got := queryString(ctx, t, rconn, kvRows); got != "a=in the backup,b=streamed" {
		t.Errorf("replica after CatchUp: %q; want the backup and the streamed commit", got)
	}
	var pgErr *pgconn.PgError
	if _, err := rconn.Exec(ctx, "INSERT INTO kv VALUES ('x', 'refused')"); !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Errorf("write on the replica: %v; want read_only_sql_transaction (25006)", err)
	}

	primary.Kill()
	replica.Promote()
	if got := queryString(ctx, t, rconn, "SELECT pg_is_in_recovery()::text"); got != "false" {
		t.Errorf("promoted: pg_is_in_recovery() = %s; want false", got)
	}
	mustExec(ctx, t, rconn, "INSERT INTO kv VALUES ('c', 'after the promotion')")

	second := replica.StartReplica(t, testserver.ReplicaOptions{})
	mustExec(ctx, t, rconn, "INSERT INTO kv VALUES ('d', 'on the new timeline')")
	second.CatchUp()
	sconn := connect(ctx, t, second.DatabaseURL(url))
	if got, want := queryString(ctx, t, sconn, kvRows), "a=in the backup,b=streamed,c=after the promotion,d=on the new timeline"; got != want {
		t.Errorf("replica of the promoted server: %q; want %q", got, want)
	}
}

// kvRows reads the rows of TestPostgresReplica's table as one string.
const kvRows = "SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM kv"

func mustExec(ctx context.Context, t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// forward relays TCP connections from a new loopback address, which it
// returns, to upstream until t ends.
func forward(t *testing.T, upstream string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			down, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				down.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, down, up)
			mu.Unlock()
			for _, pair := range [][2]net.Conn{{up, down}, {down, up}} {
				wg.Go(func() {
					_, _ = io.Copy(pair[0], pair[1])
					pair[0].Close()
					pair[1].Close()
				})
			}
		}
	})
	return l.Addr().String()
}
