package fence

import (
	"context"
	"fmt"
	"hash/fnv"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

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
// transaction (Migrate then uses a savepoint).
func Migrate(ctx context.Context, db Beginner, o TableOptions) error {
	if db == nil {
		return invalid("Migrate: nil database")
	}
	t, err := NewTable(o)
	if err != nil {
		return err
	}
	ms, err := upMigrations()
	if err != nil {
		return fmt.Errorf("fence: Migrate: %w", err)
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return t.migrate(ctx, tx, ms) })
	if err != nil {
		return fmt.Errorf("fence: Migrate %s: %w", t.qualified, err)
	}
	return nil
}

// migrateLockKey returns the advisory lock key of Migrate for t.
func (t *Table) migrateLockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("github.com/golib/lease/fence.Migrate\x00" + t.qualified))
	return int64(h.Sum64())
}

func (t *Table) migrate(ctx context.Context, tx pgx.Tx, ms []migration) error {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", t.migrateLockKey()); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	// CREATE SCHEMA IF NOT EXISTS checks the privilege to create before it
	// checks existence, so look first: a role that may only use an
	// existing schema can still run Migrate.
	var hasSchema bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1::text)", t.schema).Scan(&hasSchema); err != nil {
		return err
	}
	if !hasSchema {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{t.schema}.Sanitize()); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	var hasVersions bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1::text) IS NOT NULL", t.versions).Scan(&hasVersions); err != nil {
		return err
	}
	if !hasVersions {
		_, err := tx.Exec(ctx, "CREATE TABLE "+t.versions+` (
    version    integer     NOT NULL PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`)
		if err != nil {
			return fmt.Errorf("create versions table: %w", err)
		}
	}
	rows, err := tx.Query(ctx, "SELECT version FROM "+t.versions)
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
		if _, err := tx.Exec(ctx, t.render(m.sql)); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+t.versions+" (version, name) VALUES ($1::integer, $2::text)", m.version, m.name); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	return nil
}
