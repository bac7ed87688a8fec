package postgres

import (
	"strings"
	"testing"
)

// TestSweepListMatchesSweep: the dry run's statement decides which rows
// have ended with the same text as the sweep's, so it lists what a sweep
// would remove.
func TestSweepListMatchesSweep(t *testing.T) {
	page := func(name string) string {
		t.Helper()
		sql := loadQuery(name, names{schema: "s", table: "t", qualified: `"s"."t"`})
		start := strings.Index(sql, "WITH page AS MATERIALIZED (")
		end := strings.Index(sql, "\n)")
		if start < 0 || end < start {
			t.Fatalf("queries/%s.sql has no page CTE:\n%s", name, sql)
		}
		return sql[start:end]
	}
	if sweep, list := page("sweep"), page("sweeplist"); sweep != list {
		t.Fatalf("the page CTEs differ:\nsweep.sql:\n%s\nsweeplist.sql:\n%s", sweep, list)
	}
}
