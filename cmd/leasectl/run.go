package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"time"

	"github.com/golib/lease/lease"
)

// Exit statuses of run, beside the command's own; see the package
// documentation. They follow timeout(1) and env(1): 125 for the wrapper's
// own failure, 126 and 127 for a command that cannot be run or found, and
// a command killed by signal N reports 128+N, as a shell does.
const (
	exitRunLost     = 123 // the lease was lost while the command ran
	exitRunHeld     = 124 // the lease is held by someone else
	exitRunError    = 125 // leasectl's own error, a usage error among run's arguments included
	exitRunCannot   = 126 // the command was found but could not be started
	exitRunNotFound = 127 // the command was not found
)

// Environment variables run sets for the command: the fields of the
// acquisition's lease.Snapshot that a fenced write needs.
const (
	envKey   = "LEASE_KEY"
	envToken = "LEASE_TOKEN"
	envOwner = "LEASE_OWNER"
)

// statusError ends leasectl with code, after printing msg (if any) on
// standard error.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string {
	if e.msg == "" {
		return "exit status " + strconv.Itoa(e.code)
	}
	return e.msg
}

// runFlags are the flags of run beside the connection flags.
type runFlags struct {
	ttl, wait, killAfter time.Duration
	try                  bool
	owner                string
}

// registerRun registers run's own flags on fs.
func registerRun(fs *flag.FlagSet) *runFlags {
	f := &runFlags{}
	fs.DurationVar(&f.ttl, "ttl", 15*time.Second, "the lease's TTL; renewed every TTL/3 while the command runs")
	fs.StringVar(&f.owner, "owner", "", "the owner `O` other holders see (default hostname/pid)")
	fs.DurationVar(&f.wait, "wait", 0, "give up after waiting `D` for the lease (default 0: wait until it is free)")
	fs.BoolVar(&f.try, "try", false, "give up at once if the lease is held")
	fs.DurationVar(&f.killAfter, "kill-after", 10*time.Second, "after a lost lease, SIGKILL the command `D` after SIGTERM")
	return f
}

// runCommand is "leasectl run": it parses args (run's flags, KEY, then the
// command after "--" or at the first argument after KEY), and runs the
// command under the lease on KEY. Every error it returns is an
// *statusError.
func (c *cli) runCommand(ctx context.Context, fs *flag.FlagSet, f *runFlags, args []string) error {
	key, argv, err := parseRun(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err == nil {
		err = f.check()
	}
	if err != nil {
		return &statusError{exitRunError, fmt.Sprintf("run: %v", err)}
	}
	if err := lease.ValidateKey(key); err != nil {
		return &statusError{exitRunError, fmt.Sprintf("run: %v", err)}
	}
	owner := f.owner
	if owner == "" {
		owner = defaultRunOwner()
	}
	if err := lease.ValidateOwner(owner); err != nil {
		return &statusError{exitRunError, fmt.Sprintf("run: --owner: %v", err)}
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: f.ttl, Wait: f.wait})
	if err != nil {
		return &statusError{exitRunError, fmt.Sprintf("run: --ttl %v: %v", f.ttl, err)}
	}
	t, err := c.connect(ctx)
	if err != nil {
		return &statusError{exitRunError, err.Error()}
	}
	defer t.close()
	client, err := lease.NewClient(t.backend, lease.ClientOptions{Owner: owner, SweepEvery: -1})
	if err != nil {
		return &statusError{exitRunError, err.Error()}
	}
	r := &runner{cli: c, flags: f, key: key, argv: argv}
	return r.run(ctx, client, policy)
}

// check validates run's flags among themselves.
func (f *runFlags) check() error {
	switch {
	case f.try && f.wait != 0:
		return usagef("--try and --wait exclude each other")
	case f.wait < 0:
		return usagef("--wait %v is negative", f.wait)
	case f.killAfter < 0:
		return usagef("--kill-after %v is negative", f.killAfter)
	}
	return nil
}

// parseRun parses run's arguments: flags, KEY, more flags, then the
// command, which starts after "--" or at the first argument after KEY
// that is not a flag; the command's own arguments are never parsed.
func parseRun(fs *flag.FlagSet, args []string) (key string, argv []string, err error) {
	if err := fs.Parse(args); err != nil {
		return "", nil, err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return "", nil, usagef("run needs a key and a command: leasectl run [flags] KEY -- COMMAND [ARGS...]")
	}
	key = rest[0]
	if err := fs.Parse(rest[1:]); err != nil {
		return "", nil, err
	}
	if argv = fs.Args(); len(argv) == 0 {
		return "", nil, usagef("run %s: no command: leasectl run [flags] KEY -- COMMAND [ARGS...]", key)
	}
	return key, argv, nil
}

// defaultRunOwner is hostname/pid, which names the process to look for.
func defaultRunOwner() string {
	host, err := os.Hostname()
	if err != nil || lease.ValidateOwner(host) != nil {
		host = "unknown"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
}

// runner runs one command under one lease.
type runner struct {
	cli   *cli
	flags *runFlags
	key   string
	argv  []string
}

func (r *runner) errorf(format string, args ...any) {
	fmt.Fprintf(r.cli.errOut, "leasectl: run: "+format+"\n", args...)
}

// run acquires the lease, runs the command under managed renewal, and
// releases the lease when the command ends.
func (r *runner) run(ctx context.Context, client *lease.Client, policy lease.Policy) error {
	// Signals are run's to handle from here on: before the command starts
	// they end the wait for the lease, then they are forwarded to it.
	// Nothing below ends with ctx, which main cancels on the first SIGINT
	// or SIGTERM: the lease must be renewed, and released, until the
	// command has exited.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	bg := context.WithoutCancel(ctx)

	h, err := r.acquire(bg, client, policy, sigs)
	if err != nil {
		return err
	}
	m, err := h.StartManaged(bg)
	if err != nil {
		r.release(bg, h)
		return &statusError{exitRunError, fmt.Sprintf("run: %v", err)}
	}
	select {
	case s := <-sigs: // interrupted between the grant and the start
		r.release(bg, h)
		return &statusError{code: signalStatus(s)}
	default:
	}

	cmd := exec.Command(r.argv[0], r.argv[1:]...)
	// The command writes to leasectl's own standard output, not through
	// it: given an *os.File, os/exec hands the file itself to the command,
	// which so keeps it when leasectl dies.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, r.cli.out.w, r.cli.errOut
	cmd.Env = append(os.Environ(), envKey+"="+h.Key(), envToken+"="+h.Token().String(), envOwner+"="+h.Owner())
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		r.release(bg, h)
		code := exitRunCannot
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitRunNotFound
		}
		return &statusError{code, fmt.Sprintf("run: %v", err)}
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	lost := m.Lost()
	var st stopping
	var waitErr error
wait:
	for {
		select {
		case s := <-sigs:
			if err := signalGroup(cmd.Process, s); err != nil {
				r.errorf("forwarding %v to the command: %v", s, err)
			}
		case <-lost:
			lost = nil
			r.errorf("lost the lease on %q: %v; stopping the command (%s)", r.key, m.Err(), stopPlan(r.flags.killAfter))
			st.terminate(cmd.Process, r.flags.killAfter)
		case <-st.kill:
			st.killNow(cmd.Process)
		case waitErr = <-exited:
			break wait
		}
	}
	code := exitCode(cmd.ProcessState, waitErr)
	if err := m.Err(); err != nil {
		if lost != nil { // the loss came with the command's exit
			r.errorf("lost the lease on %q: %v", r.key, err)
		}
		// Nothing the command left running in its process group may go
		// on without the lease either.
		st.reap(cmd.Process, r.flags.killAfter)
		r.release(bg, h)
		return &statusError{exitRunLost, fmt.Sprintf("run: the lease on %q was lost while the command ran (the command's own status was %d)", r.key, code)}
	}
	if err := h.Release(bg); err != nil {
		if errors.Is(err, lease.ErrLost) {
			return &statusError{exitRunLost, fmt.Sprintf("run: the lease on %q was lost while the command ran, found when releasing it (the command's own status was %d): %v", r.key, code, err)}
		}
		r.errorf("%v (the lease ends by itself within its TTL, %v)", err, policy.TTL())
	}
	m.Stop(bg)
	return &statusError{code: code}
}

// stopping is how far the command's process group has been stopped after
// a lost lease.
type stopping struct {
	terminated, killed bool
	kill               <-chan time.Time // fires killAfter after terminate
}

// terminate sends the termination signal to p's group and arms kill.
func (s *stopping) terminate(p *os.Process, killAfter time.Duration) {
	s.terminated = true
	s.kill = time.After(killAfter)
	terminateGroup(p)
}

// killNow kills p's group.
func (s *stopping) killNow(p *os.Process) {
	s.killed, s.kill = true, nil
	killGroup(p)
}

// reap waits, after p exited on a lost lease, until the rest of its
// process group is gone: terminated if that was not done yet, killed
// when kill fires.
func (s *stopping) reap(p *os.Process, killAfter time.Duration) {
	if s.killed || !groupAlive(p) {
		return
	}
	if !s.terminated {
		s.terminate(p, killAfter)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for groupAlive(p) {
		select {
		case <-s.kill:
			s.killNow(p)
			return
		case <-tick.C:
		}
	}
}

// acquire acquires the lease as the flags say, until a signal in sigs.
func (r *runner) acquire(ctx context.Context, client *lease.Client, policy lease.Policy, sigs <-chan os.Signal) (*lease.Handle, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var got os.Signal
	stop := make(chan struct{})
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		select {
		case got = <-sigs:
			cancel()
		case <-stop:
		}
	}()
	var h *lease.Handle
	var err error
	if r.flags.try {
		h, err = client.TryAcquire(actx, r.key, policy)
	} else {
		h, err = client.Acquire(actx, r.key, policy)
	}
	close(stop)
	<-waited
	switch {
	case err == nil:
		return h, nil
	case got != nil:
		return nil, &statusError{signalStatus(got), fmt.Sprintf("run: interrupted (%v) while waiting for the lease on %q", got, r.key)}
	case errors.Is(err, lease.ErrNotAcquired):
		return nil, &statusError{exitRunHeld, fmt.Sprintf("run: %v", err)}
	}
	return nil, &statusError{exitRunError, fmt.Sprintf("run: %v", err)}
}

// release releases h after the command could not start or the lease was
// lost, reporting only what the operator can act on.
func (r *runner) release(ctx context.Context, h *lease.Handle) {
	if err := h.Release(ctx); err != nil && !errors.Is(err, lease.ErrLost) {
		r.errorf("%v (the lease ends by itself within its TTL, %v)", err, h.Policy().TTL())
	}
}

// exitCode is the status leasectl reports for the command's end.
func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return exitRunError
	}
	if n, ok := signalled(ps); ok {
		return 128 + n
	}
	return ps.ExitCode()
}
