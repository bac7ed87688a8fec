package leasequeue

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

	"github.com/golib/lease/fence"
)

// migration is one versioned up migration.
type migration struct {
	version int
	name    string
	sql     string
}

// upMigrations returns the embedded up migrations in version order.
func upMigrations() ([]migration, error) {
	fsys := PostgresMigrations()
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
func MigratePostgres(ctx context.Context, db fence.Beginner, o PostgresOptions) error {
	if db == nil {
		return errors.New("leasequeue: MigratePostgres: nil database")
	}
	n, err := newPgNames(o)
	if err != nil {
		return err
	}
	ms, err := upMigrations()
	if err != nil {
		return fmt.Errorf("leasequeue: MigratePostgres: %w", err)
	}
	if err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return n.migrate(ctx, tx, ms) }); err != nil {
		return fmt.Errorf("leasequeue: MigratePostgres %s: %w", n.jobs, err)
	}
	return nil
}

func (n pgNames) migrate(ctx context.Context, tx pgx.Tx, ms []migration) error {
	h := fnv.New64a()
	h.Write([]byte("github.com/golib/lease/leasequeue.MigratePostgres\x00" + n.jobs))
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", int64(h.Sum64())); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	// CREATE SCHEMA IF NOT EXISTS checks the privilege to create before it
	// checks existence, so look first: a role that may only use an
	// existing schema can still migrate.
	var hasSchema bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1::text)", n.schema).Scan(&hasSchema); err != nil {
		return err
	}
	if !hasSchema {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{n.schema}.Sanitize()); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	_, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+n.versions+` (
    version    integer     NOT NULL PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`)
	if err != nil {
		return fmt.Errorf("create versions table: %w", err)
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
		if _, err := tx.Exec(ctx, n.render(m.sql)); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+n.versions+" (version, name) VALUES ($1::integer, $2::text)", m.version, m.name); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	return nil
}
