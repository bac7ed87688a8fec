package postgres

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"github.com/golib/lease/internal/pgmigrate"
	"github.com/golib/lease/internal/pgplumbing"
)

// Default names of the lease table. The embedded migrations and queries are
// written against them, and Options with empty names mean them.
const (
	DefaultSchema = "public"
	DefaultTable  = "leases"
)

// versionsSuffix names the versions table of Migrate after the lease
// table, so the table's name is at most pgplumbing.MaxIdentLen minus its length.
const versionsSuffix = "_migrations"

//go:embed queries/*.sql
var queryFiles embed.FS

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the versioned migrations in the file layout of
// golang-migrate (001_lease.up.sql, 001_lease.down.sql, ...), for its iofs
// source; GooseMigrations has the same SQL in goose's layout. They are
// written for the default table public.leases. Migrate applies the same
// files with any schema and table name; use Migrations only with a
// migration tool of your own, and then keep the default names in Options.
func Migrations() fs.FS {
	return pgmigrate.Dir(migrationFiles, "migrations")
}

// GooseMigrations returns the migrations of Migrations in the layout of
// goose (github.com/pressly/goose/v3), for goose.NewProvider: one file per
// version (001_lease.sql, ...) holding the up file under "-- +goose Up"
// and the down file under "-- +goose Down". Like Migrations it names the
// default table public.leases. The files are built from those of
// Migrations, so the two never differ.
func GooseMigrations() fs.FS { return gooseMigrations }

var gooseMigrations = pgmigrate.MustGoose(Migrations())

// defaultTable is how the embedded SQL names the lease table. Every
// mention of the table in the embedded files has exactly this form, and
// render replaces it.
var defaultTable = regexp.MustCompile(`\bpublic\.leases\b`)

// render returns sql with the default table name replaced by table, an
// already quoted qualified name.
func render(sql, table string) string {
	return defaultTable.ReplaceAllLiteralString(sql, table)
}

// names holds the validated, quoted names of one lease table.
type names struct {
	schema, table string // as given (unquoted)
	qualified     string // "schema"."table", quoted
	versions      string // "schema"."table_migrations", quoted
}

func newNames(schema, table string) (names, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	if table == "" {
		table = DefaultTable
	}
	if err := pgplumbing.CheckIdent(schema); err != nil {
		return names{}, fmt.Errorf("leasepostgres: Schema %w", err)
	}
	if err := pgplumbing.CheckIdent(table + versionsSuffix); err != nil {
		return names{}, fmt.Errorf("leasepostgres: Table + %q %w", versionsSuffix, err)
	}
	return names{
		schema:    schema,
		table:     table,
		qualified: pgplumbing.Quote(schema, table),
		versions:  pgplumbing.Quote(schema, table+versionsSuffix),
	}, nil
}

// queries holds the statements of one Store, rendered for its table.
// CheckGuard's statement is not here: it takes the table from the guard.
type queries struct {
	acquire, renew, release, inspect, watch string
	sweep, sweepList                        string
	// extra is the number of result columns the writing statements
	// (acquire, renew, release) have beyond those their files document:
	// 1 with asyncCommit, whose value the Store skips.
	extra int
}

// asyncCommit ends the RETURNING list of each writing statement
// (acquire, renew, release): set_config with is_local true lasts until
// the statement's transaction ends, and a commit reads synchronous_commit
// before the setting is undone, so the commit does not wait for the WAL
// flush. It changes nothing on the connection after the transaction. A
// renew or release of a key without a row returns no row and writes
// nothing, so its commit has nothing to wait for.
const asyncCommit = ",\n       pg_catalog.set_config('synchronous_commit', 'off', true)"

func loadQuery(name, table string) string {
	b, err := queryFiles.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic(err) // the files are embedded
	}
	return render(stripComments(string(b)), table)
}

func newQueries(table string, async bool) queries {
	q := queries{
		acquire:   loadQuery("acquire", table),
		renew:     loadQuery("renew", table),
		release:   loadQuery("release", table),
		inspect:   loadQuery("inspect", table),
		watch:     loadQuery("watch", table),
		sweep:     loadQuery("sweep", table),
		sweepList: loadQuery("sweeplist", table),
	}
	if async {
		q.acquire += asyncCommit
		q.renew += asyncCommit
		q.release += asyncCommit
		q.extra = 1
	}
	return q
}

// stripComments drops the lines that are whole "--" comments, so that the
// statements sent (and shown in pg_stat_activity) are short, and keeps the
// rest unchanged.
func stripComments(sql string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(sql, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") || strings.TrimSpace(line) == "" {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return strings.TrimSpace(b.String())
}
