package postgres

import (
	"strings"
	"testing"

	"github.com/golib/lease/lease"
)

// TestRenderFunctionNames: the functions and the index of migration 005
// are named after the table, and the dollar quote around the functions'
// bodies never occurs in the names.
func TestRenderFunctionNames(t *testing.T) {
	n, err := newNames("s $body$", `t $body$ $body1$`)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := migrationFiles.ReadFile("migrations/005_lease_groups.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	sql := n.render(string(ms))
	for _, want := range []string{
		`CREATE INDEX IF NOT EXISTS "t $body$ $body1$_permits" ON "s $body$"."t $body$ $body1$" (`,
		`FUNCTION "s $body$"."t $body$ $body1$_permit"(`,
		`FUNCTION "s $body$"."t $body$ $body1$_setacquire"(`,
		`AS $body2$`,
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("rendered migration lacks %q", want)
		}
	}
	if strings.Contains(sql, "public.leases") || strings.Count(sql, "$body2$") != 8 {
		t.Errorf("rendered migration:\n%s", sql)
	}
	d, err := newNames("", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.render("public.leases_permit public.leases leases_permits $body$"); got != `"public"."leases_permit" "public"."leases" "leases_permits" $body$` {
		t.Errorf("default names render as %q", got)
	}
}

func TestSemaphoreOf(t *testing.T) {
	for _, tc := range []struct {
		key, sem string
		ok       bool
	}{
		{lease.PermitKey("jobs", 0), "jobs", true},
		{lease.PermitKey("jobs", 255), "jobs", true},
		{lease.PermitKey("a/permit/1", 7), "a/permit/1", true},
		{lease.PermitKey("", 3), "", true},
		{"jobs/permit/", "", false},
		{"jobs/permit/01", "", false},
		{"jobs/permit/x", "", false},
		{"jobs/permit/-1", "", false},
		{"jobs", "", false},
	} {
		sem, ok := semaphoreOf(tc.key)
		if sem != tc.sem || ok != tc.ok {
			t.Errorf("semaphoreOf(%q) = %q, %v; want %q, %v", tc.key, sem, ok, tc.sem, tc.ok)
		}
	}
}
