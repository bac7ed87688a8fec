package pgmigrate

import (
	"context"
	"fmt"
	"strings"

	"github.com/golib/lease/internal/pgplumbing"
)

// Need is what a package's statements need of one of its tables.
type Need struct {
	Table      string   // quoted, schema-qualified
	What       string   // how errors name it: "fences table"
	Privileges []string // "SELECT", "INSERT", ...
}

// Set is a package's tables, as Verify checks them.
type Set struct {
	Schema     string      // as given (unquoted)
	Versions   string      // the versions table, quoted and schema-qualified
	Migrations []Migration // the package's, from Load
	Migrate    string      // the Go function that applies them, for advice
	Needs      []Need
}

// Verify reports what keeps the package's statements from working on the
// tables of s, each problem saying what to change: the schema missing or
// without USAGE, a table missing, a versions table that lists fewer
// migrations than the package has, a privilege missing. Tables with no
// versions table (created by a migration tool of the user's own), or one
// the role may not read, are judged by their existence and privileges
// alone. It reads the catalog and the versions
// table, and changes nothing; an error reading them is one more problem.
func Verify(ctx context.Context, db Querier, s Set) []error {
	hint := pgplumbing.MigrateHint(s.Migrate)
	var present, usage bool
	err := db.QueryRow(ctx, `SELECT n.oid IS NOT NULL, n.oid IS NOT NULL AND has_schema_privilege(n.oid, 'USAGE')
FROM (SELECT 1) AS one LEFT JOIN pg_catalog.pg_namespace AS n ON n.nspname = $1::text`, Exec, s.Schema).Scan(&present, &usage)
	switch {
	case err != nil:
		return []error{fmt.Errorf("reading the catalog: %w", explain(err))}
	case !present:
		return []error{fmt.Errorf("schema %q does not exist: %s", s.Schema, hint)}
	case !usage:
		return []error{fmt.Errorf("the role lacks USAGE on schema %q: GRANT USAGE ON SCHEMA %s TO the role", s.Schema, pgplumbing.Quote(s.Schema))}
	}
	var problems []error
	found := 0
	for _, n := range s.Needs {
		var exists bool
		if err := db.QueryRow(ctx, "SELECT to_regclass($1::text) IS NOT NULL", Exec, n.Table).Scan(&exists); err != nil {
			return append(problems, fmt.Errorf("reading the catalog: %w", explain(err)))
		}
		if !exists {
			problems = append(problems, fmt.Errorf("%s %s not found: %s", n.What, n.Table, hint))
			continue
		}
		found++
		var missing []string
		for _, p := range n.Privileges {
			var ok bool
			if err := db.QueryRow(ctx, "SELECT has_table_privilege(to_regclass($1::text), $2::text)", Exec, n.Table, p).Scan(&ok); err != nil {
				return append(problems, fmt.Errorf("reading the privileges on %s: %w", n.Table, explain(err)))
			}
			if !ok {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Errorf("the role lacks %s on %s %s: GRANT %s ON %s TO the role",
				strings.Join(missing, ", "), n.What, n.Table, strings.Join(n.Privileges, ", "), n.Table))
		}
	}
	if found == 0 || len(s.Migrations) == 0 {
		return problems
	}
	// The role the services run as may not read the versions table, which
	// only the migrating role needs: then the tables' columns decide.
	var readable bool
	if err := db.QueryRow(ctx, "SELECT coalesce(has_table_privilege(to_regclass($1::text), 'SELECT'), false)", Exec, s.Versions).Scan(&readable); err != nil {
		return append(problems, fmt.Errorf("reading the catalog: %w", explain(err)))
	}
	if !readable {
		return problems // no versions table (a migration tool of the user's own), or not the role's to read
	}
	states, _, err := Status(ctx, db, s.Migrations, s.Versions)
	if err != nil {
		return append(problems, fmt.Errorf("reading the migration versions in %s: %w", s.Versions, err))
	}
	applied := 0
	var pending []string
	for _, st := range states {
		if st.Applied {
			applied = max(applied, st.Version)
		} else {
			pending = append(pending, st.Name)
		}
	}
	if len(pending) > 0 {
		problems = append(problems, fmt.Errorf("%s is at migration %d, this version of the package needs %d (%s pending): %s",
			s.Needs[0].Table, applied, s.Migrations[len(s.Migrations)-1].Version, strings.Join(pending, ", "), hint))
	}
	return problems
}
