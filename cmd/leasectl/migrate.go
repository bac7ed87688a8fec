package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/internal/pgmigrate"
	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/leasequeue"
)

// tableSet is one package's PostgreSQL tables, as migrate applies and
// lists their migrations.
type tableSet struct {
	name     string // "lease", "fence" or "queue", as --only names it
	table    string // the main table, quoted and schema-qualified
	versions string // its versions table, quoted
	files    fs.FS  // the package's migrations
	apply    func(ctx context.Context, pool *pgxpool.Pool) error
}

// setNames are the names --only takes, in the order migrate applies them.
var setNames = []string{"lease", "fence", "queue"}

// tableSets returns the sets the flags name, those of only (every set when
// only is empty).
func (c *cli) tableSets(only string) ([]tableSet, error) {
	cfg := &c.cfg
	want := map[string]bool{}
	for name := range strings.SplitSeq(only, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !slices.Contains(setNames, name) {
			return nil, usagef("migrate: --only %q: want a comma-separated list of %s", name, strings.Join(setNames, ", "))
		}
		want[name] = true
	}
	for _, n := range []string{cfg.schema, cfg.fenceSchema, cfg.queueSchema, cfg.table + "_migrations", cfg.fenceTable + "_migrations", cfg.queueTable + "_migrations"} {
		if err := pgplumbing.CheckIdent(n); err != nil {
			return nil, usagef("migrate: %v", err)
		}
	}
	all := []tableSet{
		{
			name: "lease", table: pgplumbing.Quote(cfg.schema, cfg.table), versions: pgplumbing.Quote(cfg.schema, cfg.table+"_migrations"),
			files: leasepostgres.Migrations(),
			apply: func(ctx context.Context, pool *pgxpool.Pool) error {
				// An UNLOGGED table (Options.Unlogged) stays so: Migrate makes
				// the table what Options says.
				var unlogged bool
				err := pool.QueryRow(ctx, "SELECT coalesce((SELECT relpersistence = 'u' FROM pg_catalog.pg_class WHERE oid = to_regclass($1::text)), false)",
					pgmigrate.Exec, pgplumbing.Quote(cfg.schema, cfg.table)).Scan(&unlogged)
				if err != nil {
					return err
				}
				return leasepostgres.Migrate(ctx, pool, leasepostgres.Options{Schema: cfg.schema, Table: cfg.table, Unlogged: unlogged})
			},
		},
		{
			name: "fence", table: pgplumbing.Quote(cfg.fenceSchema, cfg.fenceTable), versions: pgplumbing.Quote(cfg.fenceSchema, cfg.fenceTable+"_migrations"),
			files: fencepostgres.Migrations(),
			apply: func(ctx context.Context, pool *pgxpool.Pool) error {
				return fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{Schema: cfg.fenceSchema, Table: cfg.fenceTable})
			},
		},
		{
			name: "queue", table: pgplumbing.Quote(cfg.queueSchema, cfg.queueTable), versions: pgplumbing.Quote(cfg.queueSchema, cfg.queueTable+"_migrations"),
			files: leasequeue.PostgresMigrations(),
			apply: func(ctx context.Context, pool *pgxpool.Pool) error {
				return leasequeue.MigratePostgres(ctx, pool, leasequeue.PostgresOptions{Schema: cfg.queueSchema, Table: cfg.queueTable})
			},
		},
	}
	if len(want) == 0 {
		return all, nil
	}
	return slices.DeleteFunc(all, func(s tableSet) bool { return !want[s.name] }), nil
}

// migrationState is one migration as migrate prints it in JSON.
type migrationState struct {
	Set       string     `json:"set"`
	Table     string     `json:"table"`
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	Applied   bool       `json:"applied"`
	AppliedAt *time.Time `json:"applied_at,omitempty"`
}

// states reads the state of every migration of sets.
func (c *cli) states(ctx context.Context, pool *pgxpool.Pool, sets []tableSet) ([]migrationState, error) {
	var out []migrationState
	for _, s := range sets {
		ms, err := pgmigrate.Load(s.files)
		if err != nil {
			return nil, err
		}
		octx, cancel := c.op(ctx)
		st, _, err := pgmigrate.Status(octx, pool, ms, s.versions)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("reading the migrations of %s in %s: %w", s.table, s.versions, err)
		}
		for _, m := range st {
			ms := migrationState{Set: s.name, Table: s.table, Version: m.Version, Name: m.Name, Applied: m.Applied}
			if m.Applied {
				at := m.AppliedAt.UTC()
				ms.AppliedAt = &at
			}
			out = append(out, ms)
		}
	}
	return out, nil
}

// migrate applies the pending migrations of the PostgreSQL tables (with
// dryRun, lists them instead; with status, lists every migration and
// whether it is applied).
func (c *cli) migrate(ctx context.Context, t *target, only string, dryRun, status bool) error {
	if t.pool == nil {
		fmt.Fprintf(c.out, "%s keeps no schema: nothing to migrate\n", t.where)
		return nil
	}
	sets, err := c.tableSets(only)
	if err != nil {
		return err
	}
	before, err := c.states(ctx, t.pool, sets)
	if err != nil {
		return err
	}
	pending := slices.DeleteFunc(slices.Clone(before), func(m migrationState) bool { return m.Applied })
	switch {
	case status:
		if err := c.printMigrations(before, "STATE", func(m migrationState) string {
			if m.Applied {
				return "applied " + m.AppliedAt.Format(time.RFC3339)
			}
			return "pending"
		}); err != nil {
			return err
		}
		if len(pending) > 0 {
			return &negative{fmt.Sprintf("%d migration(s) pending: run leasectl migrate", len(pending))}
		}
		return nil
	case dryRun:
		if err := c.printMigrations(pending, "", nil); err != nil {
			return err
		}
		if !c.cfg.json {
			fmt.Fprintf(c.out, "would apply %d migration(s) (dry run: nothing applied)\n", len(pending))
		}
		return nil
	}
	for _, s := range sets {
		if !slices.ContainsFunc(pending, func(m migrationState) bool { return m.Set == s.name }) {
			continue
		}
		// Migrate waits for a replica that migrates the same tables at
		// once (an advisory lock), so the bound is generous.
		octx, cancel := context.WithTimeout(ctx, 6*c.cfg.timeout)
		err := s.apply(octx, t.pool)
		cancel()
		if err != nil {
			return err
		}
	}
	after, err := c.states(ctx, t.pool, sets)
	if err != nil {
		return err
	}
	var applied []migrationState
	for i, m := range after {
		if m.Applied && !before[i].Applied {
			applied = append(applied, m)
		}
	}
	if err := c.printMigrations(applied, "", nil); err != nil {
		return err
	}
	if !c.cfg.json {
		fmt.Fprintf(c.out, "applied %d migration(s); every table is up to date\n", len(applied))
	}
	return nil
}

// printMigrations prints ms, as JSON or as a table with an extra column
// (none if column is "").
func (c *cli) printMigrations(ms []migrationState, column string, value func(migrationState) string) error {
	if c.cfg.json {
		return c.printJSON(struct {
			Migrations []migrationState `json:"migrations"`
		}{append([]migrationState{}, ms...)})
	}
	if len(ms) == 0 {
		return nil
	}
	header := "SET\tTABLE\tVERSION\tMIGRATION"
	if column != "" {
		header += "\t" + column
	}
	rows := make([][]string, 0, len(ms))
	for _, m := range ms {
		row := []string{m.Set, m.Table, fmt.Sprint(m.Version), m.Name}
		if column != "" {
			row = append(row, value(m))
		}
		rows = append(rows, row)
	}
	return c.table(header, rows)
}

// diagnosePostgres is check on PostgreSQL: the lease Store's Diagnose, the
// fences table's Check, and the leasequeue tables' CheckPostgres where
// they exist (a deployment without leasequeue has none).
func (c *cli) diagnosePostgres(ctx context.Context, pool *pgxpool.Pool, store *leasepostgres.Store, ft *fencepostgres.Table) ([]error, []string) {
	r := store.Diagnose(ctx)
	problems, advice := r.Problems, r.Advice
	problems = append(problems, split(ft.Check(ctx, pool))...)
	o := leasequeue.PostgresOptions{Schema: c.cfg.queueSchema, Table: c.cfg.queueTable}
	queue := pgplumbing.Quote(o.Schema, o.Table)
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1::text) IS NOT NULL", pgmigrate.Exec, queue).Scan(&exists); err != nil {
		return append(problems, fmt.Errorf("reading the catalog: %w", err)), advice
	}
	if !exists {
		advice = append(advice, fmt.Sprintf("no leasequeue tables (%s): fine unless a service uses leasequeue's PostgreSQL source; leasectl migrate creates them (--queue-schema, --queue-table name others)", queue))
		return problems, advice
	}
	return append(problems, split(leasequeue.CheckPostgres(ctx, pool, o))...), advice
}

// split returns the problems a Check joined into err (with errors.Join,
// behind the package's prefix), one per line of check's output: each names
// its table.
func split(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := errors.Unwrap(err).(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
