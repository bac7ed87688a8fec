package fencecolumn

import (
	"testing"

	"github.com/golib/lease/internal/testkit/faults"
)

// TestClassifyRealFaults: the explainer of a column write reports every
// real fault as the store's classifier does: a plain error, or one
// matching lease.ErrIndeterminate.
func TestClassifyRealFaults(t *testing.T) {
	faults.Drive(t, faults.Postgres(t), faults.Marks(faults.ErrorsOnly(func(err error) error {
		return columnError("r", err)
	})))
}
