package cache

import (
	"testing"

	"github.com/golib/lease/internal/testkit/faults"
)

// TestClassifyRealFaults: classify reports every real fault as
// valkeyplumbing.Classify does: nil, a plain error, or one matching
// lease.ErrIndeterminate.
func TestClassifyRealFaults(t *testing.T) {
	faults.Drive(t, faults.Valkey(t), faults.Marks(func(err error) error {
		return classify(err)
	}))
}
