//go:build linux

package stall_test

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/golib/lease/internal/testkit/stall"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMeasuresRealStall stops this very process with SIGSTOP and has a
// child resume it 300ms later: the meter reports most of that as a stall,
// and never more than the period asked about.
func TestMeasuresRealStall(t *testing.T) {
	m := stall.Start(t)
	resume := exec.Command("sh", "-c", "sleep 0.3; kill -CONT "+strconv.Itoa(os.Getpid()))
	if err := resume.Start(); err != nil {
		t.Fatal(err)
	}
	from := time.Now()
	if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := resume.Wait(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * stall.Tick) // let the meter take its next sample
	to := time.Now()

	if got := m.Within(from, to); got < 200*time.Millisecond || got > to.Sub(from) {
		t.Errorf("stalled %v of the %v in which the process was stopped for 300ms", got, to.Sub(from))
	}
	if got := m.Within(to, from); got != 0 {
		t.Errorf("stalled %v in an empty period", got)
	}
}
