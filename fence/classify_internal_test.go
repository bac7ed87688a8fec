package fence

import (
	"testing"

	"github.com/golib/lease/internal/faults"
)

// TestClassifyRealFaults: the explainers of a COMMIT, of a column write
// and of a Valkey fenced command report every real fault as the store's
// classifier does: a plain error, or one matching lease.ErrIndeterminate.
// (A fenced transaction's own statement is not among them: its
// transaction is never committed after an error, so nothing is written
// whatever the statement's outcome.)
func TestClassifyRealFaults(t *testing.T) {
	t.Run("commit", func(t *testing.T) {
		faults.Drive(t, faults.Postgres(t), faults.Marks(faults.ErrorsOnly(func(err error) error {
			return commitError([]string{"r"}, err)
		})))
	})
	t.Run("column", func(t *testing.T) {
		faults.Drive(t, faults.Postgres(t), faults.Marks(faults.ErrorsOnly(func(err error) error {
			return columnError("r", err)
		})))
	})
	t.Run("valkey", func(t *testing.T) {
		faults.Drive(t, faults.Valkey(t), faults.Marks(func(err error) error { return classify("r", err) }))
	})
}
