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
// mention of the table in the embedded files has exactly this form.
var defaultTable = regexp.MustCompile(`\bpublic\.leases\b`)

// defaultNames matches how the embedded SQL names the lease table and the
// objects of migration 005 beside it: the table public.leases, the
// functions public.leases_permit, public.leases_setacquire, ..., and the
// index leases_permits, which CREATE INDEX names without its schema.
// names.render replaces each with the name derived from the Store's
// table: the table's name plus the same suffix.
var defaultNames = regexp.MustCompile(`\bpublic\.leases(_[a-z]+)?\b|\bleases_permits\b`)

// bodyTag is the dollar quote around the function bodies of the embedded
// migrations.
const bodyTag = "$body$"

// render returns sql with the default names replaced by those of n,
// quoted. If the schema's or table's name contains the dollar quote
// around function bodies, the bodies get another one.
func (n names) render(sql string) string {
	if strings.Contains(sql, bodyTag) {
		tag := bodyTag
		for i := 1; strings.Contains(n.schema, tag) || strings.Contains(n.table, tag); i++ {
			tag = fmt.Sprintf("$body%d$", i)
		}
		sql = strings.ReplaceAll(sql, bodyTag, tag)
	}
	return defaultNames.ReplaceAllStringFunc(sql, func(m string) string {
		if suffix, ok := strings.CutPrefix(m, DefaultSchema+"."+DefaultTable); ok {
			return pgplumbing.Quote(n.schema, n.table+suffix)
		}
		return pgplumbing.Quote(n.table + strings.TrimPrefix(m, DefaultTable))
	})
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
	acquire, acquirePreferred, renew, release, inspect, watch string
	handOff                                                   string
	sweep, sweepList                                          string
	// The calls of the functions of migration 005 (lease groups).
	permit, setAcquire, setRenew, setRelease string
	// extra is the number of result columns the writing statements
	// (acquire, renew, release, hand-off) have beyond those their files document:
	// 1 with asyncCommit, whose value the Store skips.
	extra int
}

// asyncCommit ends the RETURNING list of each writing statement
// (acquire, renew, release, hand-off): set_config with is_local true lasts until
// the statement's transaction ends, and a commit reads synchronous_commit
// before the setting is undone, so the commit does not wait for the WAL
// flush. It changes nothing on the connection after the transaction. A
// renew or release of a key without a row returns no row and writes
// nothing, so its commit has nothing to wait for.
const asyncCommit = ",\n       pg_catalog.set_config('synchronous_commit', 'off', true)"

// asyncCommitFrom ends the FROM list of each call of a function of
// migration 005 (permit.sql, setacquire.sql, setrenew.sql, setrelease.sql)
// with the same set_config as asyncCommit: a function of one row in FROM
// adds no column, so these statements keep the columns their files
// document.
const asyncCommitFrom = ",\n     pg_catalog.set_config('synchronous_commit', 'off', true) AS async"

// queryText returns queries/name.sql without its comments, naming the
// default table.
func queryText(name string) string {
	b, err := queryFiles.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic(err) // the files are embedded
	}
	return stripComments(string(b))
}

// loadQuery returns queries/name.sql without its comments, for the table
// and functions of n.
func loadQuery(name string, n names) string { return n.render(queryText(name)) }

func newQueries(n names, async bool) queries {
	q := queries{
		acquire:          loadQuery("acquire", n),
		acquirePreferred: loadQuery("acquirepreferred", n),
		handOff:          loadQuery("handoff", n),
		renew:            loadQuery("renew", n),
		release:          loadQuery("release", n),
		inspect:          loadQuery("inspect", n),
		watch:            loadQuery("watch", n),
		sweep:            loadQuery("sweep", n),
		sweepList:        loadQuery("sweeplist", n),
		permit:           loadQuery("permit", n),
		setAcquire:       loadQuery("setacquire", n),
		setRenew:         loadQuery("setrenew", n),
		setRelease:       loadQuery("setrelease", n),
	}
	if async {
		q.acquire += asyncCommit
		q.acquirePreferred += asyncCommit
		q.handOff += asyncCommit
		q.renew += asyncCommit
		q.release += asyncCommit
		q.extra = 1
		q.permit += asyncCommitFrom
		q.setAcquire += asyncCommitFrom
		q.setRenew += asyncCommitFrom
		q.setRelease += asyncCommitFrom
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
