package fencepostgres

import (
	"testing"

	"github.com/golib/lease/internal/testkit/faults"
)

// TestClassifyRealFaults: the explainer of a COMMIT reports every real
// fault as the store's classifier does: a plain error, or one matching
// lease.ErrIndeterminate. (A fenced transaction's own statement is not
// among them: its transaction is never committed after an error, so
// nothing is written whatever the statement's outcome.)
func TestClassifyRealFaults(t *testing.T) {
	faults.Drive(t, faults.Postgres(t), faults.Marks(faults.ErrorsOnly(func(err error) error {
		return commitError([]string{"r"}, err)
	})))
}
