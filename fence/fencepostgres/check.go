package fencepostgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/golib/lease/internal/pgmigrate"
	"github.com/golib/lease/lease"
)

// Check asks the database whether Tx, Claim, Mark and Sweep can work on the
// table through db, and returns an error listing every problem found, each
// saying what to change, or nil. Problems are: the schema missing or
// without USAGE; the fences table or its floors table missing; a versions
// table (Table + "_migrations", kept by Migrate) that lists fewer
// migrations than this version of the package has; a role without SELECT,
// INSERT or UPDATE on the fences table, or SELECT or INSERT on the floors
// table; and, unless the table's Retention is lease.KeepForever, without
// DELETE on the fences table or UPDATE on the floors table, which Sweep
// needs to retire fences. It changes nothing. Call it at start-up, after
// Migrate; leasectl check calls it.
func (t *Table) Check(ctx context.Context, db Querier) error {
	ms, err := pgmigrate.Load(Migrations())
	if err != nil {
		return fmt.Errorf("fence: check %s: %w", t.qualified, err)
	}
	fences := []string{"SELECT", "INSERT", "UPDATE"}
	floors := []string{"SELECT", "INSERT"}
	if t.retention != lease.KeepForever {
		fences = append(fences, "DELETE")
		floors = append(floors, "UPDATE")
	}
	problems := pgmigrate.Verify(ctx, db, pgmigrate.Set{
		Schema:     t.schema,
		Versions:   t.versions,
		Migrations: ms,
		Migrate:    migrateFn,
		Needs: []pgmigrate.Need{
			{Table: t.qualified, What: "fences table", Privileges: fences},
			{Table: t.floors, What: "floors table", Privileges: floors},
		},
	})
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("fence: check %s: %w", t.qualified, err)
	}
	return nil
}
