package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Timeouts for server processes.
const (
	readyTimeout = 30 * time.Second // from start until the server answers
	stopTimeout  = 10 * time.Second // from a stop signal until the process exits
	pollInterval = 20 * time.Millisecond
)

// process is one run of a server binary at a time: start it, signal it, wait
// for it, and start it again with the same arguments. Its output goes to a log
// file that survives restarts.
type process struct {
	name    string // for messages: "valkey-server", "postgres"
	path    string
	args    []string
	dir     string // working directory
	logPath string
	cred    *syscall.Credential // nil runs as the current user
	env     []string            // added to the test binary's environment

	logStart int64 // size of the log when the current run started

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	err  error         // cmd.Wait's result, set before done is closed
}

// start starts the process. The caller waits for it to answer.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
		}
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child has its own copy
	if fi, err := logFile.Stat(); err == nil {
		p.logStart = fi.Size()
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Dir = p.dir
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr(p.cred, true)
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// exited returns a channel closed when the current run has exited, and the
// run's PID.
func (p *process) exited() (<-chan struct{}, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		c := make(chan struct{})
		close(c)
		return c, 0
	}
	return p.done, p.cmd.Process.Pid
}

// running reports whether the current run hasn't exited.
func (p *process) running() bool {
	done, _ := p.exited()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// exitErr describes how the last run ended.
func (p *process) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		return errors.New("exited with status 0")
	}
	return p.err
}

// pause stops the process and every process below it with SIGSTOP, the
// process first so that it starts no new ones.
func (p *process) pause() error {
	pid, err := p.pid()
	if err != nil {
		return err
	}
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	for _, kid := range descendants(pid) {
		_ = syscall.Kill(kid, syscall.SIGSTOP)
	}
	return nil
}

// resume continues the process and every process below it with SIGCONT.
func (p *process) resume() error {
	pid, err := p.pid()
	if err != nil {
		return err
	}
	for _, kid := range descendants(pid) {
		_ = syscall.Kill(kid, syscall.SIGCONT)
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
	return nil
}

// pid returns the ID of the running process.
func (p *process) pid() (int, error) {
	done, pid := p.exited()
	select {
	case <-done:
		return 0, fmt.Errorf("%s is not running", p.name)
	default:
		return pid, nil
	}
}

// stop sends sig to the process (after resuming it, in case it is paused)
// and waits for it to exit, killing it if it takes longer than stopTimeout.
// It is a no-op when the process isn't running.
func (p *process) stop(sig syscall.Signal) error {
	done, pid := p.exited()
	select {
	case <-done:
		return nil
	default:
	}
	_ = p.resume()
	_ = syscall.Kill(pid, sig)
	select {
	case <-done:
		return nil
	case <-time.After(stopTimeout):
	}
	p.kill()
	return fmt.Errorf("%s did not exit within %v of %v; killed it", p.name, stopTimeout, sig)
}

// kill kills the process and every process below it with SIGKILL, and waits
// for the process to exit.
func (p *process) kill() {
	done, pid := p.exited()
	select {
	case <-done:
		return
	default:
	}
	kids := descendants(pid) // before their parent dies and they move
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for _, kid := range kids {
		_ = syscall.Kill(kid, syscall.SIGKILL)
	}
	<-done
}

// descendants returns the processes below pid, parents before children.
// PostgreSQL's server processes leave the postmaster's process group, so a
// signal to the group would miss them.
func descendants(pid int) []int {
	var all []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		kids := children(queue[0])
		all = append(all, kids...)
		queue = append(queue, kids...)
	}
	return all
}

// waitReady calls ready until it returns nil, the process exits, or
// readyTimeout passes. The error says which, with the log's tail.
func (p *process) waitReady(ready func(ctx context.Context) error) error {
	done, _ := p.exited()
	deadline := time.Now().Add(readyTimeout)
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		last = ready(ctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited while starting (%v)%s", p.name, p.exitErr(), logTail(p.logPath))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %v: %v%s", p.name, readyTimeout, last, logTail(p.logPath))
		}
		time.Sleep(pollInterval)
	}
}

// lostPort reports whether the last run exited because its port was taken,
// going by what it wrote to the log.
func (p *process) lostPort() bool {
	if p.running() {
		return false
	}
	b, _ := os.ReadFile(p.logPath)
	if int64(len(b)) >= p.logStart {
		b = b[p.logStart:]
	}
	return bytes.Contains(b, []byte("Address already in use"))
}

// spawner starts every server process from one goroutine locked to its OS
// thread. The parent-death signal fires when the thread that started the
// child exits, not the process, so that thread must outlive the servers:
// [Main] ends it only after stopping them, and leaves no goroutine behind.
var spawner struct {
	mu   sync.Mutex // held for a whole spawn, so stopSpawner can't race it
	reqs chan spawnReq
	done chan struct{}
}

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

// spawn starts cmd on the spawner's thread.
func spawn(cmd *exec.Cmd) error {
	spawner.mu.Lock()
	defer spawner.mu.Unlock()
	if spawner.reqs == nil {
		spawner.reqs, spawner.done = make(chan spawnReq), make(chan struct{})
		go spawnLoop(spawner.reqs, spawner.done)
	}
	errc := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd, errc}
	return <-errc
}

func spawnLoop(reqs <-chan spawnReq, done chan<- struct{}) {
	defer close(done)
	// Never unlocked: when this returns, the thread exits with it, which
	// sends the parent-death signal to any server still running.
	runtime.LockOSThread()
	for req := range reqs {
		req.errc <- req.cmd.Start()
	}
}

// stopSpawner ends the spawner's goroutine and thread, if it runs, and waits
// for it. A later spawn starts a new one.
func stopSpawner() {
	spawner.mu.Lock()
	defer spawner.mu.Unlock()
	if spawner.reqs == nil {
		return
	}
	close(spawner.reqs)
	<-spawner.done
	spawner.reqs, spawner.done = nil, nil
}

// run runs a command to completion (initdb), as cred's user when cred is set.
// Its output is appended to logPath, and its tail is in the error.
func run(ctx context.Context, logPath, dir string, cred *syscall.Credential, path string, args ...string) error {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr(cred, false)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w%s", strings.Join(cmd.Args, " "), err, logTail(logPath))
	}
	return nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago. Another
// process may take it before the server binds it; callers retry on a new port
// when that happens (see lostPort).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logLines is how much of a server's log an error shows.
const logLines = 20

// logTail returns the last lines of the log at path, formatted to follow an
// error message, or "" if there is nothing to show.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const maxRead = 8 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > maxRead {
		_, _ = f.Seek(-maxRead, io.SeekEnd)
	}
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(f)
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) > logLines {
		lines = lines[len(lines)-logLines:]
	}
	if len(lines) == 0 || (len(lines) == 1 && lines[0] == "") {
		return ""
	}
	return "\n--- last lines of " + path + " ---\n\t" + strings.Join(lines, "\n\t")
}
