//go:build !unix

package main

import (
	"os"
	"os/exec"
	"time"
)

// forwardedSignals are the signals run handles while the command runs. On
// Windows the console delivers Ctrl+C to the command itself.
var forwardedSignals = []os.Signal{os.Interrupt}

// stopPlan says how a command is stopped after a lost lease: without
// SIGTERM, it is killed at once.
func stopPlan(time.Duration) string { return "killing it: this system has no SIGTERM" }

// setProcAttr does nothing: there are no process groups to start.
func setProcAttr(*exec.Cmd) {}

// signalGroup forwards nothing: the console already delivered Ctrl+C to
// the command.
func signalGroup(*os.Process, os.Signal) error { return nil }

// terminateGroup kills the command: there is no SIGTERM.
func terminateGroup(p *os.Process) error { return p.Kill() }

// killGroup kills the command.
func killGroup(p *os.Process) error { return p.Kill() }

// groupAlive reports false: only the command itself is tracked.
func groupAlive(*os.Process) bool { return false }

// signalStatus is the exit status after an interrupt, as shells report
// SIGINT.
func signalStatus(os.Signal) int { return 130 }

// signalled reports false: a process ends with an exit code.
func signalled(*os.ProcessState) (int, bool) { return 0, false }
