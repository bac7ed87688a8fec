package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/golib/lease/internal/pgmigrate"
)

// Beginner is what Migrate needs: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx
// (which runs the migration in a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migrate creates or upgrades the lease table named by o.Schema and
// o.Table, applying each embedded migration (see Migrations) that has not
// been applied yet, and records the versions in the table
// Table + "_migrations" beside it. It also creates the schema if it does
// not exist, and makes the table UNLOGGED or logged as o.Unlogged says.
//
// Everything happens in one transaction that first takes a transaction-
// scoped advisory lock derived from the table's name, so replicas that
// start at the same time can all call Migrate: one applies the
// migrations, the others wait for it and then find nothing to do. The
// lock is released when the transaction ends, so Migrate also works
// through a connection pooler in transaction mode. On a pool or a
// connection the transaction is READ COMMITTED whatever the database's
// default, so that a waiting replica sees the migrations the first one
// committed; inside a pgx.Tx at REPEATABLE READ or SERIALIZABLE a waiting
// replica fails instead (with a unique violation or a serialization
// failure: nothing is applied twice).
//
// The role needs the privileges to create the schema (if missing) and
// tables in it. A table created earlier by a migration tool from
// Migrations is adopted.
func Migrate(ctx context.Context, db Beginner, o Options) error {
	if db == nil {
		return errors.New("leasepostgres: Migrate: nil DB")
	}
	n, err := newNames(o.Schema, o.Table)
	if err != nil {
		return err
	}
	ms, err := pgmigrate.Load(Migrations())
	if err != nil {
		return fmt.Errorf("leasepostgres: Migrate: %w", err)
	}
	err = pgmigrate.Run(ctx, db, ms, pgmigrate.Target{
		Schema:   n.schema,
		Versions: n.versions,
		Lock:     "github.com/golib/lease/backends/postgres.Migrate\x00" + n.qualified,
		Render:   n.render,
		After: func(ctx context.Context, tx pgx.Tx) error {
			if err := dropTokenCheck(ctx, tx, n.qualified); err != nil {
				return err
			}
			return setPersistence(ctx, tx, n.qualified, o.Unlogged)
		},
	})
	if err != nil {
		return fmt.Errorf("leasepostgres: Migrate %s: %w", n.qualified, err)
	}
	return nil
}

// dropTokenCheck drops the CHECK (token > 0) that 001_lease gave the
// table, as 002_token_check does. That file names the constraint after the
// default table; PostgreSQL named it after the table it created, so a
// table of another name keeps it until this finds it in the catalog.
func dropTokenCheck(ctx context.Context, tx pgx.Tx, table string) error {
	rows, err := tx.Query(ctx, `SELECT conname::text FROM pg_catalog.pg_constraint
WHERE conrelid = to_regclass($1::text) AND contype = 'c'
  AND pg_catalog.pg_get_constraintdef(oid) = 'CHECK ((token > 0))'`, pgmigrate.Exec, table)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, name := range names {
		if _, err := tx.Exec(ctx, "ALTER TABLE "+table+" DROP CONSTRAINT "+pgx.Identifier{name}.Sanitize()); err != nil {
			return err
		}
	}
	return nil
}

// setPersistence makes the table UNLOGGED or logged, as unlogged says, if
// it is not already.
func setPersistence(ctx context.Context, tx pgx.Tx, table string, unlogged bool) error {
	var persistence string
	err := tx.QueryRow(ctx, "SELECT relpersistence::text FROM pg_catalog.pg_class WHERE oid = to_regclass($1::text)", pgmigrate.Exec, table).Scan(&persistence)
	if err != nil {
		return err
	}
	switch {
	case unlogged && persistence == "p":
		_, err = tx.Exec(ctx, "ALTER TABLE "+table+" SET UNLOGGED")
	case !unlogged && persistence == "u":
		_, err = tx.Exec(ctx, "ALTER TABLE "+table+" SET LOGGED")
	}
	return err
}
