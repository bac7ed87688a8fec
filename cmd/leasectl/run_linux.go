package main

import "syscall"

// setDeathSignal has the kernel send SIGTERM to the command when leasectl
// dies (SIGKILL, a crash), so that it does not run on without the lease.
// Only the command itself receives it, not the rest of its process group.
// Pdeathsig fires when the thread that started the command exits; the Go
// runtime ends a thread only when a goroutine locked to it returns, which
// leasectl never does.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGTERM }
