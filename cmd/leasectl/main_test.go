package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golib/lease/internal/testkit/testserver"
)

// leasectl is the binary under test, built once by TestMain.
var leasectl string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "leasectl-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		leasectl = filepath.Join(dir, "leasectl")
		out, err := exec.Command("go", "build", "-o", leasectl, "github.com/golib/lease/cmd/leasectl").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "go build leasectl: %v\n%s", err, out)
			return 1
		}
		return testserver.MainLeakChecked(m)
	}())
}

// result is one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// cleanEnv is the environment without the variables leasectl reads, so
// that the machine's own settings never reach a test.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PG") || name == "DATABASE_URL" || name == "VALKEY_URL" || name == "REDIS_URL" ||
			name == "VALKEYCLI_AUTH" || name == "REDISCLI_AUTH" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// run runs leasectl with args and the extra environment variables.
func run(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, leasectl, args...)
	cmd.Env = cleanEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("leasectl %q: %v", args, err)
	}
	t.Logf("leasectl %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

// want fails unless r exited with code and its stdout contains every
// string of contains.
func (r result) want(t *testing.T, code int, contains ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range contains {
		if !strings.Contains(r.stdout+r.stderr, s) {
			t.Fatalf("output lacks %q\nstdout: %s\nstderr: %s", s, r.stdout, r.stderr)
		}
	}
}

func decode[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("stdout is not the JSON expected: %v\n%s", err, r.stdout)
	}
	return v
}

// listing is list's JSON output.
type listing struct {
	Leases []struct {
		Key         string `json:"key"`
		State       string `json:"state"`
		Owner       string `json:"owner"`
		Token       uint64 `json:"token"`
		RemainingMS int64  `json:"remaining_ms"`
	} `json:"leases"`
	NextCursor string `json:"next_cursor"`
}

// watcher is a running `leasectl watch`, read line by line.
type watcher struct {
	cmd   *exec.Cmd
	lines chan string
}

func startWatch(t *testing.T, env []string, args ...string) *watcher {
	t.Helper()
	cmd := exec.Command(leasectl, args...)
	cmd.Env = cleanEnv(env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &watcher{cmd: cmd, lines: make(chan string, 100)}
	go func() {
		defer close(w.lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			w.lines <- s.Text()
		}
		io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return w
}

// next returns the next line, failing after a timeout.
func (w *watcher) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-w.lines:
		if !ok {
			t.Fatal("watch ended early")
		}
		t.Logf("watch: %s", l)
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("no line from watch within 20s")
	}
	return ""
}

// interrupt sends SIGINT and checks that watch ends with status 0.
func (w *watcher) interrupt(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range w.lines {
	}
	if err := w.cmd.Wait(); err != nil {
		t.Fatalf("watch after SIGINT: %v, want exit status 0", err)
	}
}

var uniq atomic.Int64

func unique(s string) string {
	return fmt.Sprintf("%s%d-%d", s, time.Now().UnixNano()%1e9, uniq.Add(1))
}

func TestUsage(t *testing.T) {
	t.Parallel()
	run(t, nil).want(t, 2, "no command")
	run(t, nil, "frobnicate").want(t, 2, "unknown command")
	run(t, nil, "help").want(t, 0, "usage: leasectl")
	run(t, nil, "list").want(t, 2, "no backend")
	run(t, nil, "--valkey", "127.0.0.1:1", "--postgres", "x", "list").want(t, 2, "both --valkey and --postgres")
	run(t, []string{"VALKEY_URL=valkey://127.0.0.1:1", "PGHOST=127.0.0.1"}, "list").want(t, 2, "pass --backend")
	run(t, nil, "--valkey", "127.0.0.1:1", "inspect").want(t, 2, "inspect takes one key")
	run(t, nil, "--valkey", "127.0.0.1:1", "release", "k").want(t, 2, "release needs --force")
	run(t, nil, "--valkey", "127.0.0.1:1", "list", "--bogus").want(t, 2, "flag provided but not defined")
	run(t, nil, "--valkey", "127.0.0.1:1", "fence", "k").want(t, 2, "fence show RESOURCE")
}

// TestSecretsNeverPrinted gives leasectl connection settings with a
// password, unparsable and unreachable, and checks that no output holds it.
func TestSecretsNeverPrinted(t *testing.T) {
	t.Parallel()
	const secret = "s3cretPassw0rd"
	for _, tc := range []struct {
		args []string
		env  []string
		code int
	}{
		{args: []string{"--postgres", "postgres://u:" + secret + "@[::1/db", "list"}, code: 2},
		{args: []string{"--postgres", "postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=2", "list"}, code: 1},
		{env: []string{"DATABASE_URL=host=127.0.0.1 port=1 user=u password=" + secret + " connect_timeout=2"}, args: []string{"inspect", "k"}, code: 1},
		{env: []string{"PGHOST=127.0.0.1", "PGPORT=1", "PGPASSWORD=" + secret, "PGCONNECT_TIMEOUT=2"}, args: []string{"check"}, code: 1},
		{args: []string{"--valkey", "valkey://u:" + secret + "@[::1", "list"}, code: 2},
		{args: []string{"--valkey", "valkey://u:" + secret + "@127.0.0.1:1", "--timeout", "2s", "list"}, code: 1},
	} {
		r := run(t, tc.env, tc.args...)
		if r.code != tc.code {
			t.Errorf("leasectl %q: exit %d, want %d", tc.args, r.code, tc.code)
		}
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("leasectl %q printed the password:\n%s%s", tc.args, r.stdout, r.stderr)
		}
	}
}
