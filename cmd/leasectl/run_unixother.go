//go:build unix && !linux

package main

import "syscall"

// setDeathSignal does nothing outside Linux: if leasectl dies without
// stopping the command, the command runs on without the lease.
func setDeathSignal(*syscall.SysProcAttr) {}
