package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// SharedValkey is the standalone Valkey server shared by the tests of a
// package: the one LEASE_VALKEY_ADDR names, or one this package started.
type SharedValkey struct {
	addr string
}

var valkeyShared lazy[*SharedValkey]

// Valkey returns the package's shared standalone Valkey server, starting it on
// first use. [Main] stops it after the tests. If LEASE_VALKEY_ADDR is set, that
// server is used and nothing is started.
//
// When no server can be had, Valkey skips the test, or fails it if
// LEASE_REQUIRE_SERVERS=1. It fails the test if TestMain doesn't call [Main].
// It is safe for concurrent use.
func Valkey(t testing.TB) *SharedValkey {
	t.Helper()
	needMain(t)
	v, err := valkeyShared.get(startSharedValkey)
	if err != nil {
		unavailable(t, "no shared Valkey server", err)
	}
	return v
}

// Addr returns the server's address as host:port.
func (v *SharedValkey) Addr() string { return v.addr }

func startSharedValkey() (*SharedValkey, error) {
	if addr := os.Getenv(envValkeyAddr); addr != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := pingValkey(ctx, addr); err != nil {
			return nil, fmt.Errorf("%s=%s: %w", envValkeyAddr, addr, err)
		}
		return &SharedValkey{addr: addr}, nil
	}
	vp, err := startValkeyProc(valkeyConfig{})
	if err != nil {
		return nil, err
	}
	onStopShared(vp.close)
	return &SharedValkey{addr: vp.addr()}, nil
}

// ValkeyOptions configures a dedicated server from [StartValkey]. The zero
// value is a server that keeps no data on disk.
type ValkeyOptions struct {
	// AppendOnly turns on the append-only file with appendfsync always, so
	// every acknowledged write survives Kill and Restart. Without it the server
	// saves nothing, and a restart starts it empty.
	AppendOnly bool

	// ExtraArgs are passed to valkey-server after the harness's own
	// arguments, which they override: {"--maxmemory", "10mb"}.
	ExtraArgs []string

	// Env is added to the server's environment, "NAME=value" each: a
	// preloaded library that fakes the server's clock, for instance.
	Env []string
}

// ValkeyServer is a dedicated Valkey server for one test, which can inject
// faults on it. Its methods report failures through the test that started it
// and must be called from that test's goroutine.
type ValkeyServer struct {
	t  testing.TB
	vp *valkeyProc
}

// StartValkey starts a dedicated standalone Valkey server, stopped and deleted
// when t ends. It needs valkey-server on PATH, also when LEASE_VALKEY_ADDR is
// set, since a server this package didn't start can't be killed or paused.
//
// When the server can't be started, StartValkey skips the test, or fails it if
// LEASE_REQUIRE_SERVERS=1.
func StartValkey(t testing.TB, opts ValkeyOptions) *ValkeyServer {
	t.Helper()
	vp, err := startValkeyProc(valkeyConfig{appendOnly: opts.AppendOnly, extra: slices.Clone(opts.ExtraArgs), env: slices.Clone(opts.Env)})
	if err != nil {
		unavailable(t, "can't start a dedicated Valkey server", dedicatedErr(err, envValkeyAddr))
	}
	t.Cleanup(vp.close)
	return &ValkeyServer{t: t, vp: vp}
}

// Addr returns the server's address as host:port. It stays the same across
// restarts.
func (s *ValkeyServer) Addr() string { return s.vp.addr() }

// PID returns the process ID of the running server, or 0 if it isn't running.
func (s *ValkeyServer) PID() int {
	if !s.vp.proc.running() {
		return 0
	}
	_, pid := s.vp.proc.exited()
	return pid
}

// Stop shuts the server down with SIGTERM and waits for it to exit. With
// AppendOnly the data is on disk; without it, it is gone. Stop does nothing if
// the server isn't running.
func (s *ValkeyServer) Stop() {
	s.t.Helper()
	if err := s.vp.proc.stop(syscall.SIGTERM); err != nil {
		s.t.Fatalf("testserver: stop valkey-server at %s: %v", s.Addr(), err)
	}
}

// Kill kills the server (and any child it forked) with SIGKILL and waits for
// it to exit. Only what the append-only file already holds survives. Kill does
// nothing if the server isn't running.
func (s *ValkeyServer) Kill() {
	s.vp.proc.kill()
}

// Restart stops the server if it is running, starts it again on the same port
// with the same directory and arguments, and waits until it answers PING,
// which with AppendOnly is after it has loaded its data.
func (s *ValkeyServer) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.vp.restart(); err != nil {
		s.t.Fatalf("testserver: restart valkey-server at %s: %v", s.Addr(), err)
	}
}

// Pause stops the server and its children with SIGSTOP. Connections stay
// open, and commands wait (and time out) until [ValkeyServer.Resume].
func (s *ValkeyServer) Pause() {
	s.t.Helper()
	if err := s.vp.proc.pause(); err != nil {
		s.t.Fatalf("testserver: pause valkey-server at %s: %v", s.Addr(), err)
	}
}

// Resume continues a server stopped by [ValkeyServer.Pause] with SIGCONT.
func (s *ValkeyServer) Resume() {
	s.t.Helper()
	if err := s.vp.proc.resume(); err != nil {
		s.t.Fatalf("testserver: resume valkey-server at %s: %v", s.Addr(), err)
	}
}

// valkeyBinary is the valkey-server found on PATH.
type valkeyBinary struct {
	path  string
	major int // 8 for "8.0.1"
}

var valkeyBin lazy[valkeyBinary]

var valkeyVersionRE = regexp.MustCompile(`v=(\d+)\.(\d+)`)

func findValkey() (valkeyBinary, error) {
	path, err := exec.LookPath("valkey-server")
	if err != nil {
		return valkeyBinary{}, fmt.Errorf("valkey-server not found: %w", err)
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return valkeyBinary{}, fmt.Errorf("%s --version: %w", path, err)
	}
	m := valkeyVersionRE.FindSubmatch(out)
	if m == nil {
		return valkeyBinary{}, fmt.Errorf("%s --version: no version in %q", path, out)
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	if major < 7 || major == 7 && minor < 2 {
		return valkeyBinary{}, fmt.Errorf("%s is version %s.%s; need 7.2 or newer", path, m[1], m[2])
	}
	return valkeyBinary{path: path, major: major}, nil
}

// valkeyConfig says how to run one valkey-server.
type valkeyConfig struct {
	appendOnly bool
	cluster    bool
	extra      []string
	env        []string
}

// valkeyProc is one valkey-server this package started, with its directory.
type valkeyProc struct {
	proc    *process
	dir     string
	port    int
	busPort int // cluster bus port; 0 outside a cluster
}

// maxPortTries is how many ports a start tries before giving up.
const maxPortTries = 5

// startValkeyProc starts a valkey-server in a new directory and waits until it
// answers PING.
func startValkeyProc(cfg valkeyConfig) (*valkeyProc, error) {
	bin, err := valkeyBin.get(findValkey)
	if err != nil {
		return nil, err
	}
	dir, err := makeDir("valkey")
	if err != nil {
		return nil, err
	}
	for range maxPortTries {
		vp := &valkeyProc{dir: dir}
		if vp.port, err = freePort(); err != nil {
			break
		}
		if cfg.cluster {
			for vp.busPort == 0 || vp.busPort == vp.port {
				if vp.busPort, err = freePort(); err != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		vp.proc = &process{
			name:    "valkey-server",
			path:    bin.path,
			args:    valkeyArgs(bin, cfg, dir, vp.port, vp.busPort),
			dir:     dir,
			logPath: filepath.Join(dir, "valkey.log"),
			env:     cfg.env,
		}
		if err = vp.start(); err == nil {
			return vp, nil
		}
		vp.proc.kill()
		if !vp.proc.lostPort() {
			break
		}
		// Start over on new ports; forget the node the lost run wrote down.
		_ = os.Remove(filepath.Join(dir, "nodes.conf"))
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

func valkeyArgs(bin valkeyBinary, cfg valkeyConfig, dir string, port, busPort int) []string {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--daemonize", "no",
		"--save", "",
	}
	if cfg.appendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if bin.major >= 7 {
		args = append(args, "--enable-debug-command", "yes")
	}
	if cfg.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(busPort),
			"--cluster-announce-ip", "127.0.0.1",
			"--cluster-node-timeout", "5000",
		)
	}
	return append(args, cfg.extra...)
}

func (vp *valkeyProc) addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(vp.port))
}

// start starts the process and waits until it answers PING.
func (vp *valkeyProc) start() error {
	if err := vp.proc.start(); err != nil {
		return err
	}
	return vp.proc.waitReady(func(ctx context.Context) error { return pingValkey(ctx, vp.addr()) })
}

// restart starts the stopped process again on its port.
func (vp *valkeyProc) restart() error {
	if err := vp.start(); err != nil {
		vp.proc.kill()
		return err
	}
	return nil
}

// close kills the server and deletes its directory.
func (vp *valkeyProc) close() {
	vp.proc.kill()
	_ = os.RemoveAll(vp.dir)
}

// pingValkey returns nil if the server at addr answers PING with PONG. A
// server still loading its data answers with an error.
func pingValkey(ctx context.Context, addr string) error {
	reply, err := respString(ctx, addr, "PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return errors.New("PING answered " + strconv.Quote(reply))
	}
	return nil
}
