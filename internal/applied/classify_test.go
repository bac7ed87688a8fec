package applied_test

import (
	"testing"

	"github.com/golib/lease/internal/testkit/faults"
	"github.com/golib/lease/internal/pgstore"
	"github.com/golib/lease/internal/valkeystore"
)

// TestClassifyRealFaults drives both stores' classifiers through the same
// real faults against real servers (package faults lists them). The
// packages wrapping the classifiers run the same faults through their own
// wrappers.
func TestClassifyRealFaults(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		faults.Drive(t, faults.Postgres(t), func(t *testing.T, f faults.Fault, err error) {
			if got := pgstore.Classify(err); got != f.Want {
				t.Fatalf("pgstore.Classify(%v) = %v, want %v", err, got, f.Want)
			}
			t.Logf("%v: %v", f.Want, err)
		})
	})
	t.Run("valkey", func(t *testing.T) {
		faults.Drive(t, faults.Valkey(t), func(t *testing.T, f faults.Fault, err error) {
			if got := valkeystore.Classify(err); got != f.Want {
				t.Fatalf("valkeystore.Classify(%v) = %v, want %v", err, got, f.Want)
			}
			t.Logf("%v: %v", f.Want, err)
		})
	})
}
