// Package pgmigrate applies a package's embedded up migrations to
// PostgreSQL under the schema and table names its caller chose. It is the
// runner behind leasepostgres.Migrate, fencepostgres.Migrate and
// leasequeue.MigratePostgres; each of them checks and quotes its names
// with package pgplumbing, renders its own SQL and wraps the errors with its
// own prefix.
//
// The migrations are the files NNN_name.up.sql of golang-migrate's layout,
// written for the default names, so that migration tools can apply the
// same files unchanged. [Run] records the versions it applied in a table
// of its own (version, name, applied_at) and applies only the missing
// ones, all in one transaction under an advisory lock.
package pgmigrate

import (
	"context"
	"fmt"
	"hash/fnv"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/golib/lease/internal/pgplumbing"
)

// Exec is the exec mode of every statement Run and Applied send, and of
// those a Target's After should send: the unnamed statement, which works
// through every connection pooler whatever the pool's default mode. A
// named prepared statement (pgx's default) fails behind a pooler in
// transaction mode as soon as two client connections prepare the same
// statement on one server session.
const Exec = pgx.QueryExecModeExec

// Dir returns the subdirectory dir of an embedded file system, the files
// a package's Migrations function hands to migration tools. It panics if
// dir is not a valid path, which for an embedded directory is a bug.
func Dir(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err)
	}
	return sub
}

// MustGoose is [Goose] for a package's embedded migrations, which its
// tests load: it panics if the files are not paired, a bug.
func MustGoose(fsys fs.FS) fs.FS {
	g, err := Goose(fsys)
	if err != nil {
		panic(err)
	}
	return g
}

// Migration is one versioned up migration.
type Migration struct {
	Version int    // the file name's leading number, at least 1
	Name    string // the file name without ".up.sql"
	SQL     string // the file's text, naming the default tables
}

// Load returns the up migrations (*.up.sql) at the root of fsys in version
// order. Each file name must start with a positive number and "_".
func Load(fsys fs.FS) ([]Migration, error) {
	files, err := fs.Glob(fsys, "*.up.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
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
		ms = append(ms, Migration{Version: v, Name: strings.TrimSuffix(f, ".up.sql"), SQL: string(b)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	return ms, nil
}

// Target says where Run applies the migrations.
type Target struct {
	// Schema is the schema's name as given (unquoted). Run creates it if
	// it does not exist.
	Schema string
	// Versions is the quoted, schema-qualified name of the table that
	// records the applied versions. Run creates it if it does not exist.
	Versions string
	// Lock names the transaction-scoped advisory lock Run takes first; the
	// key is its 64-bit FNV-1a hash. It must name the tables and never
	// change between releases, so that old and new replicas migrating the
	// same tables at once exclude each other.
	Lock string
	// Render returns a migration's SQL with the default names replaced by
	// the target's quoted names.
	Render func(sql string) string
	// After, if not nil, runs in the same transaction once every
	// migration is applied, even when none was missing.
	After func(ctx context.Context, tx pgx.Tx) error
}

// Beginner begins a transaction: a *pgxpool.Pool, a *pgx.Conn, or a
// pgx.Tx (which begins a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Run applies the migrations of ms that t's versions table does not list
// yet, in order, in one transaction begun on db, and records each one.
//
// The transaction first takes the advisory lock named by t.Lock, so
// replicas that start at the same time can all call Run: one applies the
// migrations, the others wait for it and then find nothing to do. The lock
// ends with the transaction, so Run also works through a connection pooler
// in transaction mode. On error the transaction is rolled back: nothing
// is applied. The errors carry no package prefix; callers add theirs.
//
// A pool or connection begins the transaction at READ COMMITTED whatever
// the database's default, because a waiter must see what the replica that
// held the lock committed: under REPEATABLE READ or SERIALIZABLE its
// snapshot predates the wait, and it would apply the migrations again. A
// pgx.Tx runs them in a savepoint at the isolation it has.
//
// An error the server's SQLSTATE explains (a missing privilege, a refused
// login, a pooler that lost a prepared statement) says what to change.
func Run(ctx context.Context, db Beginner, ms []Migration, t Target) error {
	fn := func(tx pgx.Tx) error { return apply(ctx, tx, ms, t) }
	if b, ok := db.(txBeginner); ok {
		return explain(pgx.BeginTxFunc(ctx, b, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, fn))
	}
	return explain(pgx.BeginFunc(ctx, db, fn))
}

// explain adds to err what to change, when its SQLSTATE says.
func explain(err error) error {
	switch pgplumbing.ProblemOf(err) {
	case pgplumbing.MissingPrivilege:
		return fmt.Errorf("permission denied (configuration: the role needs CREATE on the database if the schema is missing, CREATE and USAGE on the schema, and to own the tables it upgrades): %w", err)
	case pgplumbing.PreparedStatementLost:
		return fmt.Errorf("prepared statement lost between server sessions (configuration: %s): %w", pgplumbing.PoolerHint, err)
	case pgplumbing.LoginRefused:
		return fmt.Errorf("login refused (configuration: %s): %w", pgplumbing.LoginHint, err)
	}
	return err
}

// txBeginner is a pool or a connection: what can begin a transaction with
// options.
type txBeginner interface {
	BeginTx(ctx context.Context, o pgx.TxOptions) (pgx.Tx, error)
}

func apply(ctx context.Context, tx pgx.Tx, ms []Migration, t Target) error {
	h := fnv.New64a()
	h.Write([]byte(t.Lock))
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", Exec, int64(h.Sum64())); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	// CREATE ... IF NOT EXISTS checks the privilege to create before it
	// checks existence, so look first: a role that may only use an existing
	// schema and tables can still migrate.
	var hasSchema bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1::text)", Exec, t.Schema).Scan(&hasSchema); err != nil {
		return err
	}
	if !hasSchema {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{t.Schema}.Sanitize()); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	var hasVersions bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1::text) IS NOT NULL", Exec, t.Versions).Scan(&hasVersions); err != nil {
		return err
	}
	if !hasVersions {
		_, err := tx.Exec(ctx, "CREATE TABLE "+t.Versions+` (
    version    integer     NOT NULL PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`)
		if err != nil {
			return fmt.Errorf("create versions table: %w", err)
		}
	}
	rows, err := tx.Query(ctx, "SELECT version FROM "+t.Versions, Exec)
	if err != nil {
		return err
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return err
	}
	for _, m := range ms {
		if slices.Contains(applied, int32(m.Version)) {
			continue
		}
		if _, err := tx.Exec(ctx, t.Render(m.SQL)); err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+t.Versions+" (version, name) VALUES ($1::integer, $2::text)", Exec, m.Version, m.Name); err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	if t.After != nil {
		return t.After(ctx, tx)
	}
	return nil
}

// Querier runs a query that returns one row: a *pgxpool.Pool, a *pgx.Conn
// or a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// State is one migration of a set, and whether the versions table records
// it as applied.
type State struct {
	Migration
	Applied   bool
	AppliedAt time.Time // when Run applied it; zero if not applied
}

// Status returns the state of each migration of ms in the versions table
// named versions (quoted, schema-qualified, as in Target), in ms's order,
// and whether the versions table exists. Without one every migration is
// pending: Run would apply them all (adopting tables that a migration tool
// created from the same files). It reads the catalog and the versions
// table, and changes nothing.
func Status(ctx context.Context, db Querier, ms []Migration, versions string) ([]State, bool, error) {
	var exists bool
	if err := db.QueryRow(ctx, "SELECT to_regclass($1::text) IS NOT NULL", Exec, versions).Scan(&exists); err != nil {
		return nil, false, explain(err)
	}
	at := map[int]time.Time{}
	if exists {
		var (
			vs    []int32
			times []time.Time
		)
		err := db.QueryRow(ctx, "SELECT coalesce(array_agg(version ORDER BY version), '{}'), coalesce(array_agg(applied_at ORDER BY version), '{}') FROM "+versions, Exec).Scan(&vs, &times)
		if err != nil {
			return nil, true, explain(err)
		}
		for i, v := range vs {
			at[int(v)] = times[i]
		}
	}
	states := make([]State, len(ms))
	for i, m := range ms {
		t, ok := at[m.Version]
		states[i] = State{Migration: m, Applied: ok, AppliedAt: t}
	}
	return states, exists, nil
}
