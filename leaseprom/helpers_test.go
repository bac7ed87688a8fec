package leaseprom_test

import (
	"testing"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseprom"
)

func newMemoryStore() *leasememory.Store { return leasememory.New(leasememory.Options{}) }

func newClient(t *testing.T, store lease.Backend, owner string, m *leaseprom.Metrics) *lease.Client {
	t.Helper()
	c, err := lease.NewClient(store, lease.ClientOptions{Owner: owner, Observer: m.Lease()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
