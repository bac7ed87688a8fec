package leaseprom_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseprom"
)

// One Metrics, registered once, counts a client's leases.
func Example() {
	metrics := leaseprom.New(leaseprom.Options{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)

	client, err := lease.NewClient(leasememory.New(leasememory.Options{}), lease.ClientOptions{
		Owner:    "billing-worker/1",
		Observer: metrics.Lease(),
	})
	if err != nil {
		panic(err)
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	printHeld := func() {
		fams, err := reg.Gather()
		if err != nil {
			panic(err)
		}
		for _, f := range fams {
			if f.GetName() == "lease_held" {
				fmt.Println("lease_held", f.GetMetric()[0].GetGauge().GetValue())
			}
		}
	}
	h, err := client.TryAcquire(context.Background(), "billing/nightly", policy)
	if err != nil {
		panic(err)
	}
	printHeld()
	if err := h.Release(context.Background()); err != nil {
		panic(err)
	}
	printHeld()
	// Output:
	// lease_held 1
	// lease_held 0
}
