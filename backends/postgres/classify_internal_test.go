package postgres

import (
	"testing"

	"github.com/golib/lease/internal/testkit/faults"
)

// TestClassifyRealFaults: classify reports every real fault as
// pgplumbing.Classify does: nil, a plain error, or one matching
// lease.ErrIndeterminate.
func TestClassifyRealFaults(t *testing.T) {
	faults.Drive(t, faults.Postgres(t), faults.Marks(func(err error) error {
		return classify(err, `"public"."leases"`)
	}))
}
