package valkey_test

import (
	"testing"
	"time"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

// retention is the short retention of the conformance suite's Sweeper
// subtests.
const retention = time.Second

func TestConformanceStandalone(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	s := newStore(t, c)
	short := newStoreWith(t, c, leasevalkey.Options{Retention: retention})
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend:          func(*testing.T) lease.Backend { return s },
		NewRetentionBackend: func(*testing.T) lease.Backend { return short },
		Retention:           retention,
	})
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	s := newStore(t, c)
	short := newStoreWith(t, c, leasevalkey.Options{Retention: retention})
	leasetest.RunBackendSuite(t, leasetest.Suite{
		NewBackend:          func(*testing.T) lease.Backend { return s },
		NewRetentionBackend: func(*testing.T) lease.Backend { return short },
		Retention:           retention,
	})
}
