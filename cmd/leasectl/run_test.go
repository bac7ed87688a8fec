//go:build unix

package main_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/testserver"
)

// running is a `leasectl run` in progress, its standard output read line
// by line.
type running struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr bytes.Buffer
	exited chan struct{}
	code   int
}

func startRun(t *testing.T, env []string, args ...string) *running {
	t.Helper()
	r := &running{cmd: exec.Command(leasectl, args...), lines: make(chan string, 100), exited: make(chan struct{})}
	r.cmd.Env = cleanEnv(env...)
	r.cmd.Stderr = &r.stderr
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			r.lines <- s.Text()
		}
		close(r.lines)
		err := r.cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			r.code = exit.ExitCode()
		} else if err != nil {
			r.code = -1
		}
		close(r.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-r.exited:
		default:
			r.cmd.Process.Kill()
			<-r.exited
		}
	})
	return r
}

// line returns the command's next line of output.
func (r *running) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-r.lines:
		if !ok {
			<-r.exited // stderr is complete, and no longer written, once Wait returned
			t.Fatalf("leasectl run ended early (status %d)\nstderr: %s", r.code, r.stderr.String())
		}
		t.Logf("run: %s", l)
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("no line from leasectl run within 20s")
	}
	return ""
}

// wait waits for leasectl to exit within limit and returns its status,
// the rest of its output and its standard error.
func (r *running) wait(t *testing.T, limit time.Duration) (code int, stdout, stderr string) {
	t.Helper()
	var rest []string
	deadline := time.After(limit)
	for {
		select {
		case l, ok := <-r.lines:
			if ok {
				rest = append(rest, l)
				continue
			}
			select {
			case <-r.exited:
			case <-deadline:
				t.Fatalf("leasectl run did not exit within %v", limit)
			}
			t.Logf("run exited %d\n%s\nstderr: %s", r.code, strings.Join(rest, "\n"), r.stderr.String())
			return r.code, strings.Join(rest, "\n"), r.stderr.String()
		case <-deadline:
			t.Fatalf("leasectl run did not exit within %v; output so far %q", limit, rest)
		}
	}
}

// token parses "token N" (or a bare N) from a line of a test command.
func token(t *testing.T, line string) uint64 {
	t.Helper()
	f := strings.Fields(line)
	n, err := strconv.ParseUint(f[len(f)-1], 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("no token in %q", line)
	}
	return n
}

// processGone reports whether pid has ended (a zombie counts as ended: in
// a container nobody may reap it).
func processGone(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) != nil
	}
	_, after, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(after, "Z")
}

// TestRunValkey and TestRunPostgres run commands under `leasectl run`
// against real servers.
func TestRunValkey(t *testing.T) {
	t.Parallel()
	runSuite(t, []string{"--valkey", testserver.Valkey(t).Addr(), "--valkey-prefix", unique("run") + ":"})
}

func TestRunPostgres(t *testing.T) {
	t.Parallel()
	runSuite(t, []string{"--postgres", migratedDatabase(t)})
}

// migratedDatabase returns the URL of a new database with the lease table.
func migratedDatabase(t *testing.T) string {
	t.Helper()
	url := testserver.Postgres(t).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	return url
}

func runSuite(t *testing.T, conn []string) {
	ctl := func(t *testing.T, args ...string) result { return run(t, nil, append(slices.Clone(conn), args...)...) }
	start := func(t *testing.T, args ...string) *running {
		return startRun(t, nil, append(slices.Clone(conn), args...)...)
	}

	t.Run("environment and status", func(t *testing.T) {
		t.Parallel()
		r := ctl(t, "run", "jobs/env", "--", "sh", "-c", `echo "$LEASE_KEY|$LEASE_TOKEN|$LEASE_OWNER"; exit 7`)
		r.want(t, 7)
		f := strings.Split(strings.TrimSpace(r.stdout), "|")
		if len(f) != 3 || f[0] != "jobs/env" || token(t, f[1]) == 0 || !regexp.MustCompile(`^[^/]+/[0-9]+$`).MatchString(f[2]) {
			t.Fatalf("the command saw %q, want the key, a token and hostname/pid", r.stdout)
		}
		// Without "--", the command starts after the key; its flags are its own.
		ctl(t, "run", "--owner", "nightly-job", "jobs/env", "sh", "-c", `echo "$LEASE_OWNER"; exit 0`, "--ttl").want(t, 0, "nightly-job")
		ctl(t, "run", "jobs/env", "--", "sh", "-c", `kill -TERM $$`).want(t, 128+int(syscall.SIGTERM))
	})

	t.Run("held, lost by a forced release, released at the end", func(t *testing.T) {
		t.Parallel()
		const key = "jobs/forced"
		// The command and a process it starts ignore SIGTERM: only the
		// SIGKILL to the process group after --kill-after ends them.
		first := start(t, "run", "--ttl", "1s", "--kill-after", "300ms", key, "--", "sh", "-c",
			`trap "" TERM; sleep 60 & echo "grandchild $!"; echo "token $LEASE_TOKEN"; wait`)
		grandchild := int(token(t, first.line(t)))
		t1 := token(t, first.line(t))

		ctl(t, "run", "--try", key, "--", "true").want(t, 124, "held by")
		ctl(t, "run", "--wait", "200ms", key, "--", "true").want(t, 124, "held by")

		ctl(t, "release", "--force", "--yes", key).want(t, 0, "expired the lease")
		began := time.Now()
		code, _, stderr := first.wait(t, 10*time.Second)
		if code != 123 || !strings.Contains(stderr, "lost the lease") {
			t.Fatalf("run after a forced release: exit %d, stderr %q; want 123 and the loss", code, stderr)
		}
		// One renewal interval (TTL/3) to notice, then --kill-after.
		if took := time.Since(began); took > 3*time.Second {
			t.Errorf("run took %v to stop its command after the forced release", took)
		}
		if !processGone(grandchild) {
			t.Errorf("the command's child %d still runs after the lease was lost", grandchild)
		}

		r := ctl(t, "run", "--try", key, "--", "sh", "-c", `echo "token $LEASE_TOKEN"`)
		r.want(t, 0)
		if t3 := token(t, r.stdout); t3 <= t1 {
			t.Fatalf("token after the forced release %d, want above %d", t3, t1)
		}
		ctl(t, "inspect", key).want(t, 0, "free")
	})

	t.Run("lost by expiry", func(t *testing.T) {
		t.Parallel()
		const key = "jobs/expired"
		first := start(t, "run", "--ttl", "1s", key, "--", "sh", "-c",
			`trap 'echo "got TERM"; exit 0' TERM; echo started; while :; do sleep 0.05; done`)
		first.line(t)
		// leasectl stops renewing; its command, in a group of its own, runs on.
		if err := first.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1200 * time.Millisecond)
		ctl(t, "run", "--try", key, "--", "true").want(t, 0)
		if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := first.wait(t, 10*time.Second)
		if code != 123 || !strings.Contains(stdout, "got TERM") || !strings.Contains(stderr, "lost the lease") {
			t.Fatalf("run after its lease expired: exit %d, stdout %q, stderr %q; want 123 and the command stopped with SIGTERM", code, stdout, stderr)
		}
	})

	t.Run("signals are forwarded", func(t *testing.T) {
		t.Parallel()
		const key = "jobs/signalled"
		first := start(t, "run", "--ttl", "1s", key, "--", "sh", "-c",
			`trap 'echo "got INT"; exit 5' INT; echo started; while :; do sleep 0.05; done`)
		first.line(t)
		if err := first.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if code, stdout, _ := first.wait(t, 10*time.Second); code != 5 || !strings.Contains(stdout, "got INT") {
			t.Fatalf("run after SIGINT: exit %d, stdout %q; want the command's 5 after its trap", code, stdout)
		}
		ctl(t, "inspect", key).want(t, 0, "free")
	})

	t.Run("leasectl killed", func(t *testing.T) {
		t.Parallel()
		if runtime.GOOS != "linux" {
			t.Skip("the command learns of leasectl's death on Linux only (Pdeathsig)")
		}
		first := start(t, "run", "--ttl", "1s", "jobs/killed", "--", "sh", "-c",
			`trap 'echo "got TERM"; exit 0' TERM; echo "pid $$"; while :; do sleep 0.05; done`)
		// Should the command outlive leasectl, end it with its group.
		pgid := int(token(t, first.line(t)))
		t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
		if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// The command still writes to the pipe leasectl shared with it.
		if l := first.line(t); l != "got TERM" {
			t.Fatalf("the command after leasectl was killed: %q, want its SIGTERM trap", l)
		}
		first.wait(t, 10*time.Second)
	})

	t.Run("leasectl's own errors", func(t *testing.T) {
		t.Parallel()
		ctl(t, "run", "jobs/usage").want(t, 125, "no command")
		ctl(t, "run").want(t, 125, "needs a key and a command")
		ctl(t, "run", "--try", "--wait", "1s", "jobs/usage", "--", "true").want(t, 125, "exclude each other")
		ctl(t, "run", "--ttl", "1ms", "jobs/usage", "--", "true").want(t, 125, "TTL")
		ctl(t, "run", "", "--", "true").want(t, 125)
		ctl(t, "run", "jobs/usage", "--", filepath.Join(t.TempDir(), "missing")).want(t, 127)
		ctl(t, "run", "jobs/usage", "--", t.TempDir()).want(t, 126)
		// The lease was released after the command could not start.
		ctl(t, "run", "--try", "jobs/usage", "--", "true").want(t, 0)
		run(t, nil, "--valkey", "127.0.0.1:1", "--timeout", "1s", "run", "--try", "jobs/usage", "--", "true").want(t, 125)
	})
}

// TestRunDocumentedScript runs the shell fragment of docs/operations.md
// under `leasectl run` against a real PostgreSQL with psql: it writes its
// row with the lease's token, and refuses to write with an older token.
func TestRunDocumentedScript(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("psql"); err != nil {
		t.Skip("psql not on PATH")
	}
	script := documentedScript(t)
	url := migratedDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE reports (name text PRIMARY KEY, body text, fence_key text, fence_token bigint)`); err != nil {
		t.Fatal(err)
	}
	row := func() (key string, tok uint64) {
		if err := pool.QueryRow(ctx, `SELECT fence_key, fence_token FROM reports WHERE name = 'nightly'`).Scan(&key, &tok); err != nil {
			t.Fatal(err)
		}
		return key, tok
	}
	env := []string{"DATABASE_URL=" + url}
	run(t, env, "run", "--try", "reports/nightly", "--", "sh", script).want(t, 0)
	key, t1 := row()
	if key != "reports/nightly" || t1 == 0 {
		t.Fatalf("after the first run the row is fenced by %q with token %d", key, t1)
	}
	run(t, env, "run", "--try", "reports/nightly", "--", "sh", script).want(t, 0)
	if _, t2 := row(); t2 <= t1 {
		t.Fatalf("the second run left token %d, want above %d", t2, t1)
	}
	// A run that lost its lease writes with its older token.
	stale := exec.Command("sh", script)
	stale.Env = cleanEnv(append(env, "LEASE_KEY=reports/nightly", "LEASE_TOKEN="+strconv.FormatUint(t1, 10), "LEASE_OWNER=old")...)
	out, err := stale.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "refused") {
		t.Fatalf("the script with an older token: %v\n%s; want it refused", err, out)
	}
}

// documentedScript writes the shell fragment of docs/operations.md that
// follows its marker to a file, and returns the file's path.
func documentedScript(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "<!-- shell fragment: nightly-report.sh")
	if !ok {
		t.Fatal("docs/operations.md has no shell fragment nightly-report.sh")
	}
	_, after, _ = strings.Cut(after, "```sh\n")
	body, _, ok := strings.Cut(after, "```\n")
	if !ok {
		t.Fatal("the shell fragment of docs/operations.md does not end")
	}
	path := filepath.Join(t.TempDir(), "nightly-report.sh")
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}
