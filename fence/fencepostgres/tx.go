package fencepostgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/applied"
	"github.com/golib/lease/internal/pgmigrate"
	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/lease"
)

// DefaultSchema and DefaultTable name the fences table when TableOptions
// leave them empty.
const (
	DefaultSchema = "public"
	DefaultTable  = "lease_fences"
)

// defaultQualified and defaultFloors are how the embedded SQL names the
// fences table and its floors table; Table replaces them with the
// configured names.
const (
	defaultQualified = "public.lease_fences"
	defaultFloors    = "public.lease_fences_floors"
)

// floorsSuffix names the floors table after the fences table.
const floorsSuffix = "_floors"

var (
	//go:embed migrations/*.sql
	migrationFiles embed.FS
	//go:embed queries/advance.sql
	advanceSQL string
	//go:embed queries/retire.sql
	retireSQL string
	//go:embed queries/due.sql
	dueSQL string
)

// Migrations returns the embedded migrations of the fences table in the
// file layout of golang-migrate (NNN_name.up.sql and NNN_name.down.sql),
// for its iofs source; GooseMigrations has the same SQL in goose's layout.
// They name the table public.lease_fences: keep TableOptions' names empty
// with them. Migrate applies the same files itself, under any schema and
// table name.
func Migrations() fs.FS {
	return pgmigrate.Dir(migrationFiles, "migrations")
}

// GooseMigrations returns the migrations of Migrations in the layout of
// goose (github.com/pressly/goose/v3), for goose.NewProvider: one file per
// version (NNN_name.sql) holding the up file under "-- +goose Up" and the
// down file under "-- +goose Down". The files are built from those of
// Migrations, so the two never differ.
func GooseMigrations() fs.FS { return gooseMigrations }

var gooseMigrations = pgmigrate.MustGoose(Migrations())

// Beginner begins a transaction: a *pgxpool.Pool, a *pgx.Conn, or a pgx.Tx
// (which begins a savepoint). See WithTxOptions for an isolation level.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// TxBeginner begins a transaction with options: a *pgxpool.Pool or a
// *pgx.Conn.
type TxBeginner interface {
	BeginTx(ctx context.Context, txOptions pgx.TxOptions) (pgx.Tx, error)
}

// WithTxOptions returns a Beginner whose Begin calls db.BeginTx with o, so
// that Tx runs at o's isolation level and access mode:
//
//	fencepostgres.Tx(ctx, fencepostgres.WithTxOptions(pool, pgx.TxOptions{IsoLevel: pgx.Serializable}), snap, resources, fn)
func WithTxOptions(db TxBeginner, o pgx.TxOptions) Beginner {
	return txOptions{db: db, o: o}
}

type txOptions struct {
	db TxBeginner
	o  pgx.TxOptions
}

func (b txOptions) Begin(ctx context.Context) (pgx.Tx, error) { return b.db.BeginTx(ctx, b.o) }

// DefaultRetireLockTimeout is how long, by default, a sweep of a fences
// table waits for the table lock that retiring a page of fences takes
// (see Table.Sweep).
const DefaultRetireLockTimeout = 100 * time.Millisecond

// TableOptions name a fences table and say when its fences retire. The
// zero value names public.lease_fences and retires fences that have not
// advanced for lease.DefaultRetention.
type TableOptions struct {
	// Schema holds the table. Default DefaultSchema ("public").
	Schema string
	// Table is the table's name. Default DefaultTable ("lease_fences").
	// Migrate records applied migrations in Table + "_migrations" beside
	// it, so Table is at most 52 bytes. The floors of the table's lease
	// keys are in Table + "_floors", beside it.
	Table string
	// Retention is how long a fence that has not advanced (accepted a
	// higher token, or a first one) is kept before Sweep retires it:
	// deletes its row and raises the floor of its lease key to its token,
	// so that the lease's stale writers stay refused on that resource and
	// on every other (see package fence's documentation, "Retirement"). Safety
	// holds for any retention; the retention only decides how many fences
	// the table keeps. Default lease.DefaultRetention; lease.KeepForever
	// retires nothing.
	Retention time.Duration
	// RetireLockTimeout bounds how long Sweep waits for the lock that
	// retiring a page takes, which conflicts with every fenced write on the
	// table: fenced writes that begin meanwhile wait behind it. A page whose
	// lock is not granted in time is skipped (see Table.Sweep). Default
	// DefaultRetireLockTimeout (100ms); at least a millisecond.
	RetireLockTimeout time.Duration
}

// Table is a fences table in PostgreSQL: one row per resource with the
// lease key it is fenced by and the highest token it has accepted, and
// beside it the floors of the lease keys whose fences were retired. Its
// methods take the database on each call, so one Table serves every pool,
// connection and transaction. It is immutable and safe for concurrent use.
type Table struct {
	schema, table string
	qualified     string // quoted schema.table
	floors        string // quoted schema.table_floors
	versions      string // quoted schema.table_migrations
	retention     time.Duration
	lockTimeout   time.Duration
	advance       string
	retire        string
	due           string
	lock          string // the statement that locks the table for a retirement
}

// NewTable returns the fences table o names. It fails, wrapping ErrInvalid,
// if a name is too long or not valid UTF-8, or a duration is out of range;
// names are quoted, so any other characters are allowed. It does not talk
// to the database: run Migrate (or apply Migrations) first.
func NewTable(o TableOptions) (*Table, error) {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := pgplumbing.CheckIdent(o.Schema); err != nil {
		return nil, invalid("TableOptions.Schema %w", err)
	}
	if err := pgplumbing.CheckIdent(o.Table + "_migrations"); err != nil {
		return nil, invalid("TableOptions.Table + \"_migrations\" %w", err)
	}
	retention, err := checkRetention(o.Retention)
	if err != nil {
		return nil, err
	}
	switch {
	case o.RetireLockTimeout == 0:
		o.RetireLockTimeout = DefaultRetireLockTimeout
	case o.RetireLockTimeout < time.Millisecond:
		return nil, invalid("TableOptions.RetireLockTimeout %v is below a millisecond", o.RetireLockTimeout)
	}
	t := &Table{
		schema:      o.Schema,
		table:       o.Table,
		qualified:   pgplumbing.Quote(o.Schema, o.Table),
		floors:      pgplumbing.Quote(o.Schema, o.Table+floorsSuffix),
		versions:    pgplumbing.Quote(o.Schema, o.Table+"_migrations"),
		retention:   retention,
		lockTimeout: o.RetireLockTimeout,
	}
	t.advance = t.render(advanceSQL)
	t.retire = t.render(retireSQL)
	t.due = t.render(dueSQL)
	t.lock = "LOCK TABLE " + t.qualified + " IN SHARE ROW EXCLUSIVE MODE"
	return t, nil
}

// render replaces the default table names in embedded SQL with t's: the
// floors table first, whose default name starts with the fences table's.
func (t *Table) render(sql string) string {
	return strings.NewReplacer(defaultFloors, t.floors, defaultQualified, t.qualified).Replace(sql)
}

// Name returns the table's quoted, schema-qualified name.
func (t *Table) Name() string { return t.qualified }

// FloorsName returns the quoted, schema-qualified name of the table's
// floors table: its name followed by "_floors", in its schema.
func (t *Table) FloorsName() string { return t.floors }

var defaultFences = func() *Table {
	t, err := NewTable(TableOptions{})
	if err != nil {
		panic(err)
	}
	return t
}()

// Tx runs fn in a transaction fenced by snap on the default fences table,
// public.lease_fences. See Table.Tx.
func Tx(ctx context.Context, db Beginner, snap lease.Snapshot, resources []string, fn func(pgx.Tx) error) error {
	return defaultFences.Tx(ctx, db, snap, resources, fn)
}

// Claim advances the fences of resources to snap on the default fences
// table, writing nothing else. See Table.Claim.
func Claim(ctx context.Context, db Beginner, snap lease.Snapshot, resources ...string) error {
	return defaultFences.Claim(ctx, db, snap, resources...)
}

// Tx begins a transaction on db, checks and advances the fence of every
// resource in resources to snap, runs fn in the transaction, and commits.
//
// The fences are checked with one statement, before fn runs, in sorted
// order without duplicates, so transactions that name the same resources in
// any order never deadlock on the fences. Each fence's row stays locked
// until the transaction ends: fenced transactions on a resource run one
// after the other. If any fence refuses snap (see Mark.Admit), fn is not
// called, everything is rolled back, and Tx returns the *StaleError or
// *ForeignLeaseError of the first refusing resource in sorted order; a
// token more than MaxTokenLead ahead of PostgreSQL's clock is refused the
// same way, with an *ImplausibleTokenError naming the first resource. If fn
// returns an error, or panics, everything is rolled back, the fences
// included, and Tx returns fn's error (a serialization failure or deadlock
// in fn comes back as a *ConflictError wrapping it).
//
// db may be a pool, a connection or a transaction; in a transaction Tx uses
// a savepoint, and nothing is durable until the outer transaction commits.
// The transaction runs at db's default isolation level; WithTxOptions
// picks another. The fence is correct at every level: at REPEATABLE READ
// and SERIALIZABLE a concurrent fenced write surfaces as a serialization
// failure, which Tx returns as a *ConflictError (ErrConflict, IsRetryable)
// for the caller to retry the whole transaction.
//
// The fence costs one round trip over fn's own statements. Tokens of 2^63
// and above do not fit a bigint and are refused with ErrInvalid before any
// I/O. A failed COMMIT whose outcome is unknown (the connection broke) is
// reported as lease.ErrIndeterminate.
func (t *Table) Tx(ctx context.Context, db Beginner, snap lease.Snapshot, resources []string, fn func(pgx.Tx) error) error {
	rs, err := t.prepare(db, snap, resources)
	if err != nil {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		if pgplumbing.IsConflict(err) {
			return &fence.ConflictError{Resources: rs, Err: err}
		}
		return fmt.Errorf("fence: resources %q: begin: %w", rs, err)
	}
	// After a commit, Rollback is a no-op; on every other path (errors,
	// panics) it ends the transaction or savepoint.
	defer func() { _ = tx.Rollback(ctx) }()
	if err := t.check(ctx, tx, snap, rs); err != nil {
		return err
	}
	if fn != nil {
		if err := fn(tx); err != nil {
			if pgplumbing.IsConflict(err) {
				return &fence.ConflictError{Resources: rs, Err: err}
			}
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return commitError(rs, err)
	}
	return nil
}

// Claim advances the fences of resources to snap and commits, writing
// nothing else: from then on, writes with older tokens are refused even if
// the new holder has not written yet. It is Tx with an empty fn, and
// returns the same errors.
func (t *Table) Claim(ctx context.Context, db Beginner, snap lease.Snapshot, resources ...string) error {
	return t.Tx(ctx, db, snap, resources, nil)
}

// prepare validates a fenced transaction before any I/O.
func (t *Table) prepare(db Beginner, snap lease.Snapshot, resources []string) ([]string, error) {
	if db == nil {
		return nil, invalid("nil database")
	}
	if err := fence.ValidateSnapshot(snap); err != nil {
		return nil, err
	}
	rs, err := sortedResources(resources)
	if err != nil {
		return nil, err
	}
	if snap.Token > math.MaxInt64 {
		return nil, invalid("resources %q: token %d of lease %q does not fit a PostgreSQL bigint (largest 2^63−1)", rs, snap.Token, snap.Key)
	}
	return rs, nil
}

// check runs the advance statement and applies its verdict.
func (t *Table) check(ctx context.Context, tx pgx.Tx, snap lease.Snapshot, rs []string) error {
	rows, err := tx.Query(ctx, t.advance, rs, snap.Key, int64(snap.Token), snap.Owner, maxLeadMicros)
	if err != nil {
		return t.statementError(rs, err)
	}
	marks := make(map[string]fence.Mark, len(rs))
	var (
		resource, key *string
		token         int64
		largest       *int64
		floor         *int64
	)
	_, err = pgx.ForEachRow(rows, []any{&resource, &key, &token}, func() error {
		switch {
		case resource == nil && key == nil:
			l := token
			largest = &l
		case resource == nil:
			f := token
			floor = &f
		default:
			marks[*resource] = fence.Mark{Key: *key, Token: lease.Token(token)}
		}
		return nil
	})
	if err != nil {
		return t.statementError(rs, err)
	}
	if largest != nil {
		return &fence.ImplausibleTokenError{Resource: rs[0], Key: snap.Key, Token: snap.Token, Largest: lease.Token(*largest)}
	}
	if floor != nil {
		return &fence.StaleError{Resource: rs[0], Key: snap.Key, Token: snap.Token, Current: lease.Token(*floor), Floor: true}
	}
	want := fence.Mark{Key: snap.Key, Token: snap.Token}
	for _, r := range rs {
		m, ok := marks[r]
		switch {
		case !ok || m == want:
			continue // admitted: unchanged (same token again) or advanced
		case m.Key != snap.Key:
			return &fence.ForeignLeaseError{Resource: r, Key: snap.Key, Token: snap.Token, FencedBy: m.Key, Current: m.Token}
		}
		return &fence.StaleError{Resource: r, Key: snap.Key, Token: snap.Token, Current: m.Token}
	}
	return nil
}

// statementError explains an error of the fence statement.
func (t *Table) statementError(rs []string, err error) error {
	if pgplumbing.IsConflict(err) {
		return &fence.ConflictError{Resources: rs, Err: err}
	}
	switch p := pgplumbing.ProblemOf(err); p {
	case pgplumbing.MissingTable:
		return lease.Misconfigured(fmt.Errorf("fence: resources %q: fences table %s or its floors table %s not found (configuration: %s, or apply fencepostgres.Migrations): %w", rs, t.qualified, t.floors, pgplumbing.MigrateHint(migrateFn), err))
	case pgplumbing.MissingPrivilege:
		return lease.Misconfigured(fmt.Errorf("fence: resources %q: permission denied on fences table %s or its floors table %s (configuration: GRANT SELECT, INSERT, UPDATE on the first, SELECT, INSERT on the second to the role): %w", rs, t.qualified, t.floors, err))
	case pgplumbing.NoProblem:
	default:
		return lease.Misconfigured(fmt.Errorf("fence: resources %q: fences table %s (configuration: %s): %w", rs, t.qualified, p.Hint(migrateFn, "SELECT, INSERT, UPDATE ON "+t.qualified+", SELECT, INSERT ON "+t.floors), err))
	}
	// Whatever the outcome of the statement, the transaction it ran in is
	// never committed: Tx returns before the COMMIT.
	return fmt.Errorf("fence: resources %q: fence statement failed, nothing written: %w", rs, err)
}

// commitError explains a failed COMMIT; pgplumbing.Classify says whether it
// may have committed.
func commitError(rs []string, err error) error {
	switch {
	case pgplumbing.IsConflict(err):
		return &fence.ConflictError{Resources: rs, Err: err}
	case errors.Is(err, pgx.ErrTxCommitRollback):
		return fmt.Errorf("fence: resources %q: the transaction had failed (a statement in fn failed and fn went on), rolled back, nothing written: %w", rs, err)
	case pgplumbing.Classify(err) == applied.No && pgconn.SafeToRetry(err):
		return fmt.Errorf("fence: resources %q: commit not sent, nothing written: %w", rs, err)
	case pgplumbing.Classify(err) == applied.No:
		return fmt.Errorf("fence: resources %q: commit refused, nothing written: %w", rs, err)
	}
	return lease.Indeterminate(fmt.Errorf("fence: resources %q: commit: %w", rs, err))
}
