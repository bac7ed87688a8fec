package applied_test

import (
	"testing"

	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/internal/testkit/faults"
	"github.com/golib/lease/internal/valkeyplumbing"
)

// TestClassifyRealFaults drives both stores' classifiers through the same
// real faults against real servers (package faults lists them). The
// packages wrapping the classifiers run the same faults through their own
// wrappers.
func TestClassifyRealFaults(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		faults.Drive(t, faults.Postgres(t), func(t *testing.T, f faults.Fault, err error) {
			if got := pgplumbing.Classify(err); got != f.Want {
				t.Fatalf("pgplumbing.Classify(%v) = %v, want %v", err, got, f.Want)
			}
			t.Logf("%v: %v", f.Want, err)
		})
	})
	t.Run("valkey", func(t *testing.T) {
		faults.Drive(t, faults.Valkey(t), func(t *testing.T, f faults.Fault, err error) {
			if got := valkeyplumbing.Classify(err); got != f.Want {
				t.Fatalf("valkeyplumbing.Classify(%v) = %v, want %v", err, got, f.Want)
			}
			t.Logf("%v: %v", f.Want, err)
		})
	})
}
