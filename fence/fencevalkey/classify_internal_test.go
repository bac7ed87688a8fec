package fencevalkey

import (
	"testing"

	"github.com/golib/lease/internal/testkit/faults"
)

// TestClassifyRealFaults: the explainer of a Valkey fenced command reports
// every real fault as the store's classifier does: a plain error, or one
// matching lease.ErrIndeterminate.
func TestClassifyRealFaults(t *testing.T) {
	faults.Drive(t, faults.Valkey(t), faults.Marks(func(err error) error { return classify("r", err) }))
}
