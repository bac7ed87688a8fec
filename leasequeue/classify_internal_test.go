package leasequeue

import (
	"testing"

	"github.com/golib/lease/internal/testkit/faults"
)

// TestClassifyRealFaults: the sources' explainers report every real fault
// as the store's classifier does: a plain error, or one matching
// lease.ErrIndeterminate.
func TestClassifyRealFaults(t *testing.T) {
	t.Run("postgres statement", func(t *testing.T) {
		faults.Drive(t, faults.Postgres(t), faults.Marks(faults.ErrorsOnly(func(err error) error {
			return pgError("finish", "1", err)
		})))
	})
	t.Run("postgres commit", func(t *testing.T) {
		faults.Drive(t, faults.Postgres(t), faults.Marks(faults.ErrorsOnly(func(err error) error {
			return commitError("1", err)
		})))
	})
	t.Run("valkey", func(t *testing.T) {
		faults.Drive(t, faults.Valkey(t), faults.Marks(faults.ErrorsOnly(func(err error) error {
			return valkeyError("defer", "1", err)
		})))
	})
}
