package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Beginner is what Migrate needs: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx
// (which runs the migration in a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// migration is one versioned up migration.
type migration struct {
	version int
	name    string
	sql     string
}

// upMigrations returns the embedded up migrations in version order.
func upMigrations() ([]migration, error) {
	fsys := Migrations()
	files, err := fs.Glob(fsys, "*.up.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, f := range files {
		num, _, ok := strings.Cut(f, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name does not start with a version number", f)
		}
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(f, ".up.sql"), sql: string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	return ms, nil
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
// through a connection pooler in transaction mode.
//
// The role needs the privileges to create the schema (if missing) and
// tables in it. A table created earlier by a migration tool from
// Migrations is adopted.
func Migrate(ctx context.Context, db Beginner, o Options) error {
	if db == nil {
		return errors.New("postgres: Migrate: nil DB")
	}
	n, err := newNames(o.Schema, o.Table)
	if err != nil {
		return err
	}
	ms, err := upMigrations()
	if err != nil {
		return fmt.Errorf("postgres: Migrate: %w", err)
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		return migrate(ctx, tx, n, ms, o.Unlogged)
	})
	if err != nil {
		return fmt.Errorf("postgres: Migrate %s: %w", n.qualified, err)
	}
	return nil
}

// migrateLockKey returns the advisory lock key of Migrate for one table.
func migrateLockKey(n names) int64 {
	h := fnv.New64a()
	h.Write([]byte("github.com/golib/lease/backends/postgres.Migrate\x00" + n.qualified))
	return int64(h.Sum64())
}

func migrate(ctx context.Context, tx pgx.Tx, n names, ms []migration, unlogged bool) error {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", migrateLockKey(n)); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	// CREATE ... IF NOT EXISTS checks the privilege to create before it
	// checks existence, so look first: a role that may only use an existing
	// schema and table can still run Migrate.
	var hasSchema bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1::text)", n.schema).Scan(&hasSchema); err != nil {
		return err
	}
	if !hasSchema {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{n.schema}.Sanitize()); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	var hasVersions bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1::text) IS NOT NULL", n.versions).Scan(&hasVersions); err != nil {
		return err
	}
	if !hasVersions {
		_, err := tx.Exec(ctx, "CREATE TABLE "+n.versions+` (
    version    integer     NOT NULL PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`)
		if err != nil {
			return fmt.Errorf("create versions table: %w", err)
		}
	}
	rows, err := tx.Query(ctx, "SELECT version FROM "+n.versions)
	if err != nil {
		return err
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return err
	}
	for _, m := range ms {
		if slices.Contains(applied, int32(m.version)) {
			continue
		}
		if _, err := tx.Exec(ctx, render(m.sql, n.qualified)); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+n.versions+" (version, name) VALUES ($1::integer, $2::text)", m.version, m.name); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	var persistence string
	err = tx.QueryRow(ctx, "SELECT relpersistence::text FROM pg_catalog.pg_class WHERE oid = to_regclass($1::text)", n.qualified).Scan(&persistence)
	if err != nil {
		return err
	}
	switch {
	case unlogged && persistence == "p":
		_, err = tx.Exec(ctx, "ALTER TABLE "+n.qualified+" SET UNLOGGED")
	case !unlogged && persistence == "u":
		_, err = tx.Exec(ctx, "ALTER TABLE "+n.qualified+" SET LOGGED")
	}
	return err
}
