package applied_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/golib/lease/internal/testserver"
)

// After a dial fails (the rows that stop a server or dial a closed port),
// valkey-go waits out its reconnect back-off in a goroutine that
// Client.Close does not wait for; it ends on its own within a second.
func TestMain(m *testing.M) {
	os.Exit(testserver.MainLeakChecked(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*call).DelayDo.func1")))
}
