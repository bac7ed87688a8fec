//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// forwardedSignals are the signals run passes on to the command.
var forwardedSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// stopPlan says how a command is stopped after a lost lease.
func stopPlan(killAfter time.Duration) string {
	return fmt.Sprintf("SIGTERM to its process group, then SIGKILL after %v", killAfter)
}

// setProcAttr starts the command in a process group of its own, so that
// a signal reaches every process it starts (a shell script's children
// too), as consul lock does; on Linux the command also gets SIGTERM if
// leasectl dies without stopping it.
func setProcAttr(cmd *exec.Cmd) {
	attr := &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(attr)
	cmd.SysProcAttr = attr
}

// signalGroup sends s to the process group p leads. A group that is gone
// is not an error.
func signalGroup(p *os.Process, s os.Signal) error {
	sig, ok := s.(syscall.Signal)
	if !ok {
		return p.Signal(s)
	}
	if err := syscall.Kill(-p.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// terminateGroup asks the command's process group to stop.
func terminateGroup(p *os.Process) error { return signalGroup(p, syscall.SIGTERM) }

// killGroup kills the command's process group.
func killGroup(p *os.Process) error { return signalGroup(p, syscall.SIGKILL) }

// groupAlive reports whether a process of p's group still exists.
func groupAlive(p *os.Process) bool {
	err := syscall.Kill(-p.Pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// signalStatus is the exit status of a process killed by s: 128 + its
// number, as a shell reports it.
func signalStatus(s os.Signal) int {
	if sig, ok := s.(syscall.Signal); ok {
		return 128 + int(sig)
	}
	return exitRunError
}

// signalled returns the number of the signal that ended the process, if a
// signal did.
func signalled(ps *os.ProcessState) (int, bool) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return int(ws.Signal()), true
	}
	return 0, false
}
