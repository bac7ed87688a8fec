package fencepostgres

import (
	"context"
	"fmt"

	"github.com/golib/lease/internal/pgmigrate"
)

// migrateFn names Migrate in errors.
const migrateFn = "fencepostgres.Migrate"

// Migrate creates or upgrades the fences table o names, applying each
// embedded migration (see Migrations) that has not been applied yet, and
// records the versions in the table Table + "_migrations" beside it. It
// creates the schema if it does not exist.
//
// Everything happens in one transaction that first takes a transaction-
// scoped advisory lock derived from the table's name, so replicas that
// start at the same time can all call Migrate: one applies the migrations,
// the others wait for it and then find nothing to do. The lock is released
// when the transaction ends, so Migrate also works through a connection
// pooler in transaction mode. db may be a pool, a connection or a
// transaction (Migrate then uses a savepoint). On a pool or a connection
// the transaction is READ COMMITTED whatever the database's default, so
// that a waiting replica sees what the first one committed.
func Migrate(ctx context.Context, db Beginner, o TableOptions) error {
	if db == nil {
		return invalid("Migrate: nil database")
	}
	t, err := NewTable(o)
	if err != nil {
		return err
	}
	ms, err := pgmigrate.Load(Migrations())
	if err != nil {
		return fmt.Errorf("fence: Migrate: %w", err)
	}
	err = pgmigrate.Run(ctx, db, ms, pgmigrate.Target{
		Schema:   t.schema,
		Versions: t.versions,
		// The lock keeps the name of the function's old home, so that
		// replicas on either side of the move take the same lock.
		Lock:   "github.com/golib/lease/fence.Migrate\x00" + t.qualified,
		Render: t.render,
	})
	if err != nil {
		return fmt.Errorf("fence: Migrate %s: %w", t.qualified, err)
	}
	return nil
}
