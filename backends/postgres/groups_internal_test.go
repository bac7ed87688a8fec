package postgres

import (
	"strings"
	"testing"
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
