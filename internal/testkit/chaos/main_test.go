package chaos_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	if chaos.IsChild() {
		os.Exit(chaos.RunChild())
	}
	code := testserver.Main(m)
	if code == 0 {
		if err := findLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakOptions ignore the harness's process spawner, which lives as long as
// the test binary by design, and the goroutines of toxiproxy links that
// closed while a toxic held data for them: toxiproxy 2.5.0 leaves those
// blocked for good (see chaos.Proxy). They belong to the test's proxy, not
// to the code under test.
var leakOptions = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/golib/lease/internal/testkit/testserver.spawn.func1.1"),
	goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
	goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
}

// findLeaks looks for leaked goroutines for up to five seconds: valkey-go's
// reconnection back-off sleeps up to about a second after a connection
// failed, and returns on its own after its client was closed.
func findLeaks() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := goleak.Find(leakOptions...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}
