package leasetest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The clock tests start goroutines that wait on timers; none may outlive
// its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
