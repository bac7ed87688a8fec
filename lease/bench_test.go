package lease_test

import (
	"context"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
)

// The benchmarks report cpu-ns/op, the process's CPU time per cycle,
// beside ns/op: on a shared machine wall time follows the load, CPU time
// much less.

// BenchmarkAcquireRelease measures the client's own cost per cycle, on the
// memory backend, whose operations are a map lookup under a mutex.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	c, _ := lease.NewClient(leasememory.New(leasememory.Options{}), lease.ClientOptions{Owner: "bench"})
	p, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	b.ReportAllocs()
	cpu := startCPU()
	for b.Loop() {
		h, err := c.TryAcquire(ctx, "k", p)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

// BenchmarkBackendAcquireRelease is the floor for BenchmarkAcquireRelease:
// the same cycle straight on the backend.
func BenchmarkBackendAcquireRelease(b *testing.B) {
	ctx := context.Background()
	s := leasememory.New(leasememory.Options{})
	b.ReportAllocs()
	cpu := startCPU()
	for b.Loop() {
		tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "bench", Nonce: "n", TTL: 30 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, lease.Acquisition{Key: "k", Owner: "bench", Nonce: "n", Token: tok}); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

// cpuClock measures the process's CPU time over a benchmark.
type cpuClock struct {
	start time.Duration
	ok    bool
}

func startCPU() cpuClock {
	t, ok := cpuTime()
	return cpuClock{t, ok}
}

// report reports the CPU time per iteration since c started, if the
// platform tells it.
func (c cpuClock) report(b *testing.B) {
	if t, ok := cpuTime(); ok && c.ok && b.N > 0 {
		b.ReportMetric(float64(t-c.start)/float64(b.N), "cpu-ns/op")
	}
}
