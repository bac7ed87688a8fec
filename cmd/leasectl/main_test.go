package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
	return runFor(t, 60*time.Second, env, args...)
}

// runFor is run that kills leasectl after d.
func runFor(t *testing.T, d time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
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

// until returns the next line that contains s, skipping error lines
// (a server restarting), and fails on any other line in between.
func (w *watcher) until(t *testing.T, s string) string {
	t.Helper()
	for {
		l := w.next(t)
		switch {
		case strings.Contains(l, s):
			return l
		case strings.Contains(l, "error"):
		default:
			t.Fatalf("watch printed %q, want a line with %q", l, s)
		}
	}
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
	run(t, nil, "--valkey", "127.0.0.1:1", "release", "k").want(t, 2, "release needs --force", "leasectl release --help")
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

// TestHelp asks every command for its help: each has its own usage line,
// flags with their defaults and exit statuses, with --help, -h or help
// COMMAND, and the global help lists them all.
func TestHelp(t *testing.T) {
	t.Parallel()
	own := map[string][]string{
		"list":    {"usage: leasectl [connection flags] list", "--limit N", "--cursor C", "--held", "--prefix P", "0  listed"},
		"inspect": {"usage: leasectl [connection flags] inspect [--permits N] KEY", "--permits N", "3  the key (with --permits: every permit) has no record"},
		"watch":   {"usage: leasectl [connection flags] watch", "--interval", "(default 250ms)", "1  a bad start", "record", "lost", "token-down"},
		"release": {"usage: leasectl [connection flags] release --force", "--yes", "--token T", "dry run", "0  released; or, in a dry run, would release", "SEM/permit/SLOT"},
		"fence":   {"usage: leasectl [connection flags] fence show", "--lease KEY", "--fence-postgres DSN", "--fence-valkey URL", "3  the resource has no fence"},
		"gc":      {"usage: leasectl [connection flags] gc", "--dry-run", "3  another process is sweeping"},
		"check":   {"usage: leasectl [connection flags] check", "Diagnose", "3  problems found"},
	}
	global := run(t, nil, "--help")
	global.want(t, 0, "usage: leasectl [connection flags] command", "--version", "--timeout D", "(default 10s)", "--valkey-prefix P", "(default lease:)")
	texts := map[string]bool{}
	for verb, wants := range own {
		if !strings.Contains(global.stdout, "\n  "+verb+" ") {
			t.Errorf("the global help does not list %s:\n%s", verb, global.stdout)
		}
		wants = append(wants, "exit status:", "2  usage", "connection flags", "--valkey URL")
		r := run(t, nil, verb, "--help")
		r.want(t, 0, wants...)
		run(t, nil, "help", verb).want(t, 0, wants...)
		run(t, nil, "--valkey", "127.0.0.1:1", verb, "-h").want(t, 0, wants...)
		if texts[r.stdout] || r.stdout == global.stdout {
			t.Errorf("leasectl %s --help prints another command's help", verb)
		}
		texts[r.stdout] = true
	}
	run(t, nil, "help", "frobnicate").want(t, 2, "unknown command")
}

// TestVersion checks --version: the module version, "(devel)" for a
// build in a checkout.
func TestVersion(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "--version")
	r.want(t, 0, "leasectl ")
	if v := strings.TrimSpace(strings.TrimPrefix(r.stdout, "leasectl ")); v == "" || strings.Contains(v, "\n") {
		t.Fatalf("--version printed %q, want one line with a version", r.stdout)
	}
}

// jsonError is the error object of --json.
type jsonError struct {
	Error string `json:"error"`
	Kind  string `json:"kind"`
	Exit  int    `json:"exit"`
}

// TestJSONErrors checks that with --json every failure without an
// answer prints a JSON error object on stdout, usage errors of every
// command included, whether --json comes before or after the mistake.
func TestJSONErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		kind string
		msg  string
	}{
		{[]string{"--json"}, 2, "usage", "no command"},
		{[]string{"--json", "frobnicate"}, 2, "usage", "unknown command"},
		{[]string{"list", "--bogus", "--json"}, 2, "usage", "flag provided but not defined"},
		{[]string{"--json", "list"}, 2, "usage", "no backend"},
		{[]string{"--valkey", "127.0.0.1:1", "--json", "list", "--limit", "-1"}, 2, "usage", "negative"},
		{[]string{"--valkey", "127.0.0.1:1", "--json", "inspect"}, 2, "usage", "inspect takes one key"},
		{[]string{"--valkey", "127.0.0.1:1", "--json", "watch"}, 2, "usage", "watch takes one key"},
		{[]string{"--valkey", "127.0.0.1:1", "--json", "release", "k"}, 2, "usage", "release needs --force"},
		{[]string{"--valkey", "127.0.0.1:1", "--json", "fence", "k"}, 2, "usage", "fence show RESOURCE"},
		{[]string{"--valkey", "127.0.0.1:1", "--json", "gc", "extra"}, 2, "usage", "gc takes no arguments"},
		{[]string{"--valkey", "127.0.0.1:1", "--json", "check", "extra"}, 2, "usage", "check takes no arguments"},
		{[]string{"--valkey", "127.0.0.1:1", "--json", "inspect", ""}, 2, "usage", "key"},
		{[]string{"--valkey", "127.0.0.1:1", "--json=true", "inspect", "k"}, 1, "error", "connecting to Valkey"},
		{[]string{"--postgres", "postgres://u@127.0.0.1:1/db?connect_timeout=2", "inspect", "k", "--json"}, 1, "error", "connecting to PostgreSQL"},
	} {
		r := run(t, nil, tc.args...)
		if r.code != tc.code {
			t.Errorf("leasectl %q: exit %d, want %d", tc.args, r.code, tc.code)
			continue
		}
		var e jsonError
		if err := json.Unmarshal([]byte(r.stdout), &e); err != nil {
			t.Errorf("leasectl %q: stdout is not a JSON error object: %v\n%s", tc.args, err, r.stdout)
			continue
		}
		if e.Kind != tc.kind || e.Exit != tc.code || !strings.Contains(e.Error, tc.msg) {
			t.Errorf("leasectl %q: error object %+v, want kind %q, exit %d and %q", tc.args, e, tc.kind, tc.code, tc.msg)
		}
		if !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("leasectl %q: stderr %q lacks the message", tc.args, r.stderr)
		}
	}
	// Without --json, stdout stays empty on an error.
	if r := run(t, nil, "--valkey", "127.0.0.1:1", "inspect", "k"); r.code != 1 || r.stdout != "" {
		t.Errorf("an error without --json: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := run(t, nil, "--json=false", "frobnicate"); r.code != 2 || r.stdout != "" {
		t.Errorf("an error with --json=false: exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestValkeyConnectTimeout points leasectl at a port that accepts
// connections and never answers: --timeout bounds the connection, as it
// does on PostgreSQL (valkey-go's own dial timeout is 5 s).
func TestValkeyConnectTimeout(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	r := run(t, nil, "--valkey", ln.Addr().String(), "--timeout", "1s", "--json", "inspect", "k")
	took := time.Since(start)
	r.want(t, 1, "no answer within --timeout 1s")
	if took > 3*time.Second {
		t.Fatalf("leasectl --timeout 1s took %v against a server that never answers", took)
	}
	if e := decode[jsonError](t, r); e.Kind != "error" || e.Exit != 1 {
		t.Fatalf("error object %+v", e)
	}
}

// TestDocsListEveryCommand checks that the runbook's table and the package
// documentation name every command that leasectl --help lists.
func TestDocsListEveryCommand(t *testing.T) {
	t.Parallel()
	help := run(t, nil, "--help")
	_, list, _ := strings.Cut(help.stdout, "commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	runbook, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	pkgdoc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(list) {
		verb := strings.Fields(line)[0]
		n++
		if !strings.Contains(string(runbook), "| `leasectl "+verb) {
			t.Errorf("docs/operations.md has no row for leasectl %s", verb)
		}
		if !strings.Contains(string(pkgdoc), "//\t"+verb) {
			t.Errorf("doc.go does not list %s", verb)
		}
	}
	if n == 0 {
		t.Fatalf("leasectl --help lists no command:\n%s", help.stdout)
	}
}
