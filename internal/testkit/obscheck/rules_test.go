package obscheck

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// runbook is the page that shows the rules file and explains each alert.
const runbook = "../../../docs/operations.md"

// rulesMarker is the line right before the runbook's copy of the rules
// file.
const rulesMarker = "<!-- file: lease.rules.yml -->"

// alertRow matches a row of the runbook's table of alerts, whose first
// cell is the alert's name.
var alertRow = regexp.MustCompile("^\\| `(Lease[A-Za-z]+)` \\|")

// TestRunbookShowsTheRules checks that docs/operations.md shows the rules
// file as it is, in a yaml block after rulesMarker, and explains every
// alert of it, and no other, in one row of its table.
func TestRunbookShowsTheRules(t *testing.T) {
	page, err := os.ReadFile(runbook)
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := bytes.Cut(page, []byte(rulesMarker+"\n```yaml\n"))
	if !ok {
		t.Fatalf("%s has no yaml block after %s", runbook, rulesMarker)
	}
	block, _, ok := bytes.Cut(after, []byte("```\n"))
	if !ok || !bytes.Equal(block, file) {
		t.Errorf("the yaml block after %s in %s is not %s as it is: copy the file into it", rulesMarker, runbook, rulesFile)
	}
	var rows []string
	for _, line := range strings.Split(string(page), "\n") {
		if m := alertRow.FindStringSubmatch(line); m != nil {
			rows = append(rows, m[1])
		}
	}
	var names []string
	for _, r := range loadRules(t) {
		names = append(names, r.Alert)
	}
	sort.Strings(rows)
	sort.Strings(names)
	if !slices.Equal(rows, names) {
		t.Errorf("%s's table explains the alerts %v; the rules file has %v", runbook, rows, names)
	}
}

// checkAlertsExercised, after a run of every test, reports the alerts of
// the rules file that no test made fire and clear, and returns 1 if there
// are any.
func checkAlertsExercised() int {
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		return 0 // some tests only
	}
	rules, err := parseRules()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var missing []string
	for _, r := range rules {
		if _, ok := exercised.Load(r.Alert); !ok {
			missing = append(missing, r.Alert)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: no test made these alerts of %s fire and clear: %v\n", rulesFile, missing)
		return 1
	}
	return 0
}
