package leasequeue

import (
	"context"
	"errors"
	"fmt"

	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/internal/pgmigrate"
)

// MigratePostgres creates or upgrades the leasequeue tables o names,
// applying each embedded migration (see PostgresMigrations) not applied
// yet, and records the versions in the table Table + "_migrations" beside
// them. It creates the schema if it does not exist.
//
// Everything happens in one transaction that first takes a transaction-
// scoped advisory lock derived from the tables' name, so replicas that
// start at the same time can all call it: one applies the migrations, the
// others wait and then find nothing to do. db may be a pool, a connection
// or a transaction (MigratePostgres then uses a savepoint).
func MigratePostgres(ctx context.Context, db fencepostgres.Beginner, o PostgresOptions) error {
	if db == nil {
		return errors.New("leasequeue: MigratePostgres: nil database")
	}
	n, err := newPgNames(o)
	if err != nil {
		return err
	}
	ms, err := pgmigrate.Load(PostgresMigrations())
	if err != nil {
		return fmt.Errorf("leasequeue: MigratePostgres: %w", err)
	}
	err = pgmigrate.Run(ctx, db, ms, pgmigrate.Target{
		Schema:   n.schema,
		Versions: n.versions,
		Lock:     "github.com/golib/lease/leasequeue.MigratePostgres\x00" + n.jobs,
		Render:   n.render,
	})
	if err != nil {
		return fmt.Errorf("leasequeue: MigratePostgres %s: %w", n.jobs, err)
	}
	return nil
}
