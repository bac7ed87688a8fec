package telemetry

import (
	"os"
	"strings"
	"testing"

	"github.com/golib/lease/lease"
)

// TestRunbookExplainsEveryReason: the runbook says what each value of the
// reason label means, and the label has a value for every lease.Reason.
func TestRunbookExplainsEveryReason(t *testing.T) {
	page, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Reasons {
		if !strings.Contains(string(page), "`"+r+"`: ") {
			t.Errorf("docs/operations.md does not explain the reason %q (as `%s`: ...)", r, r)
		}
	}
	for _, r := range []lease.LostReason{lease.Expired, lease.Superseded, lease.DeadlinePassed, lease.ForceReleased, lease.RecordLost} {
		if got := LostReason(&lease.LostError{Reason: r}); got == "unknown" {
			t.Errorf("lease reason %v has no label", r)
		}
	}
}
