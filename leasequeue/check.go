package leasequeue

import (
	"context"
	"errors"
	"fmt"

	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/internal/pgmigrate"
)

// CheckPostgres asks the database whether a PostgresSource and its roster
// can work on the tables o names, through db, and returns an error listing
// every problem found, each saying what to change, or nil. Problems are:
// the schema missing or without USAGE; the items table or its roster table
// (Table + "_members") missing; a versions table (Table + "_migrations",
// kept by MigratePostgres) that lists fewer migrations than this version of
// the package has; a role without SELECT, INSERT, UPDATE or DELETE on
// either table. It changes nothing. Call it at start-up, after
// MigratePostgres; leasectl check calls it.
func CheckPostgres(ctx context.Context, db fencepostgres.Querier, o PostgresOptions) error {
	n, err := newPgNames(o)
	if err != nil {
		return err
	}
	ms, err := pgmigrate.Load(PostgresMigrations())
	if err != nil {
		return fmt.Errorf("leasequeue: check %s: %w", n.jobs, err)
	}
	all := []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
	problems := pgmigrate.Verify(ctx, db, pgmigrate.Set{
		Schema:     n.schema,
		Versions:   n.versions,
		Migrations: ms,
		Migrate:    "leasequeue.MigratePostgres",
		Needs: []pgmigrate.Need{
			{Table: n.jobs, What: "leasequeue items table", Privileges: all},
			{Table: n.members, What: "leasequeue roster table", Privileges: all},
		},
	})
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("leasequeue: check %s: %w", n.jobs, err)
	}
	return nil
}
