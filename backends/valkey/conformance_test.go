package valkey_test

import (
	"testing"

	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

func TestConformanceStandalone(t *testing.T) {
	t.Parallel()
	s := newStore(t, standalone(t))
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend: func(*testing.T) lease.Backend { return s },
	})
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	s := newStore(t, cluster(t))
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend: func(*testing.T) lease.Backend { return s },
	})
}
