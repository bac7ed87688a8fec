package lease_test

import (
	"context"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
)

// BenchmarkAcquireRelease measures the client's own cost per cycle, on the
// memory backend, whose operations are a map lookup under a mutex.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	c, _ := lease.NewClient(leasememory.New(leasememory.Options{}), lease.ClientOptions{Owner: "bench"})
	p, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	b.ReportAllocs()
	for b.Loop() {
		h, err := c.TryAcquire(ctx, "k", p)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBackendAcquireRelease is the floor for BenchmarkAcquireRelease:
// the same cycle straight on the backend.
func BenchmarkBackendAcquireRelease(b *testing.B) {
	ctx := context.Background()
	s := leasememory.New(leasememory.Options{})
	b.ReportAllocs()
	for b.Loop() {
		tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "bench", Nonce: "n", TTL: 30 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, lease.Acquisition{Key: "k", Owner: "bench", Nonce: "n", Token: tok}); err != nil {
			b.Fatal(err)
		}
	}
}
