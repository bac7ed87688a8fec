package postgres_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// 100 on Linux).
const clockTick = 10 * time.Millisecond

// serverCPU returns the user and system CPU time used so far by the
// postmaster pid and the server processes it started (its children: they
// leave its process group with setsid). It returns 0 where /proc cannot be
// read. A child that exits takes its time with it; the pools keep their
// connections during a run.
func serverCPU(pid int) time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// The fields after the command name, which ends with the last ')':
		// state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
		// cmajflt utime stime ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 13 {
			continue
		}
		self, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if ppid, _ := strconv.Atoi(fields[1]); ppid != pid && self != pid {
			continue
		}
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		ticks += utime + stime
	}
	return time.Duration(ticks) * clockTick
}

// clientCPU returns the user and system CPU time of this process.
func clientCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter measures the CPU time the server and this process spend per
// cycle: with 16 goroutines on 2 cores the two share the machine, so their
// sum decides the throughput.
type cpuMeter struct {
	pid              int // the postmaster's
	server0, client0 time.Duration
}

func newCPUMeter(pid int) *cpuMeter {
	return &cpuMeter{pid: pid, server0: serverCPU(pid), client0: clientCPU()}
}

// report reports the CPU time per cycle since m was made, n cycles ago.
func (m *cpuMeter) report(b *testing.B, n int) {
	b.ReportMetric(float64((serverCPU(m.pid)-m.server0).Microseconds())/float64(n), "server-us/cycle")
	b.ReportMetric(float64((clientCPU()-m.client0).Microseconds())/float64(n), "client-us/cycle")
}
