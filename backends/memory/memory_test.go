package memory_test

import (
	"testing"
	"time"

	"github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformanceFakeClock(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	store := memory.New(memory.Options{Clock: clock})
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend: func(*testing.T) lease.Backend { return store },
		Clock:      clock,
	})
}

func TestConformanceRealTime(t *testing.T) {
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend: func(*testing.T) lease.Backend { return memory.New(memory.Options{}) },
		TTL:        150 * time.Millisecond,
	})
}
