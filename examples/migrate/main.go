// Command migrate applies the PostgreSQL migrations of this module with a
// migration tool, goose or golang-migrate, instead of the library's own
// leasepostgres.Migrate, fencepostgres.Migrate and leasequeue.MigratePostgres:
// the lease table, the fences table and the leasequeue tables.
//
//	DATABASE_URL=postgres://user@localhost:5432/app go run . -tool goose
//	DATABASE_URL=postgres://user@localhost:5432/app go run . -tool golang-migrate -down
//
// It is a module of its own, so that the module github.com/golib/lease
// never requires either tool.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // pgx5:// URLs
	"github.com/golang-migrate/migrate/v4/source/iofs"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"
	"github.com/pressly/goose/v3"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/leasequeue"
)

func main() {
	tool := flag.String("tool", "goose", "the migration tool: goose or golang-migrate")
	down := flag.Bool("down", false, "migrate down: drop the tables")
	flag.Parse()
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		fmt.Fprintln(os.Stderr, "migrate example: set DATABASE_URL")
		os.Exit(2)
	}
	if err := run(context.Background(), *tool, dsn, *down, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "migrate example:", err)
		os.Exit(1)
	}
}

// docs:begin sets
// Each package's migrations, in both layouts. Every set starts at version
// 1, so each needs a version table of its own in the tool: here the name
// of the set's table followed by the tool's usual name for it. None of
// them may be the table the library's own Migrate records its versions
// in (leases_migrations, lease_fences_migrations,
// leasequeue_jobs_migrations).
var sets = []struct {
	table      string // the set's (first) table
	migrations fs.FS  // golang-migrate's layout: NNN_name.up.sql, NNN_name.down.sql
	goose      fs.FS  // goose's layout: NNN_name.sql
}{
	{"leases", leasepostgres.Migrations(), leasepostgres.GooseMigrations()},
	{"lease_fences", fencepostgres.Migrations(), fencepostgres.GooseMigrations()},
	{"leasequeue_jobs", leasequeue.PostgresMigrations(), leasequeue.PostgresGooseMigrations()},
}

// docs:end sets

// run migrates every set up (or down) with tool.
func run(ctx context.Context, tool, dsn string, down bool, out io.Writer) error {
	var db *sql.DB // goose's connection
	if tool == "goose" {
		var err error
		if db, err = sql.Open("pgx", dsn); err != nil {
			return err
		}
		defer db.Close()
	} else if tool != "golang-migrate" {
		return fmt.Errorf("-tool %q: want goose or golang-migrate", tool)
	}
	for _, s := range sets {
		var err error
		if tool == "goose" {
			err = withGoose(ctx, db, s.goose, s.table+"_goose_db_version", down)
		} else {
			err = withGolangMigrate(dsn, s.migrations, s.table+"_schema_migrations", down)
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", tool, s.table, err)
		}
		fmt.Fprintf(out, "%s: %s migrated %s\n", tool, s.table, map[bool]string{false: "up", true: "down"}[down])
	}
	return nil
}

// docs:begin goose
// withGoose migrates one set of migrations in goose's layout up or down
// on db, recording the versions in the table versions.
func withGoose(ctx context.Context, db *sql.DB, fsys fs.FS, versions string, down bool) error {
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName(versions))
	if err != nil {
		return err
	}
	if down {
		_, err = provider.DownTo(ctx, 0)
	} else {
		_, err = provider.Up(ctx)
	}
	return err
}

// docs:end goose

// docs:begin golang-migrate
// withGolangMigrate migrates one set of migrations in golang-migrate's
// layout up or down on the database dsn (a postgres:// URL), recording
// the versions in the table versions.
func withGolangMigrate(dsn string, fsys fs.FS, versions string, down bool) error {
	src, err := iofs.New(fsys, ".")
	if err != nil {
		return err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return errors.New("DATABASE_URL is not a URL") // the error would show the password
	}
	u.Scheme = "pgx5" // golang-migrate's driver for pgx v5
	q := u.Query()
	q.Set("x-migrations-table", versions)
	u.RawQuery = q.Encode()
	m, err := migrate.NewWithSourceInstance("iofs", src, u.String())
	if err != nil {
		return err
	}
	defer m.Close()
	if down {
		err = m.Down()
	} else {
		err = m.Up()
	}
	if errors.Is(err, migrate.ErrNoChange) {
		return nil
	}
	return err
}

// docs:end golang-migrate
