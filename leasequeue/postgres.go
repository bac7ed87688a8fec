package leasequeue

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/applied"
	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/internal/pgmigrate"
	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/lease"
)

// Default names of PostgresOptions.
const (
	DefaultPostgresSchema = "public"
	DefaultPostgresTable  = "leasequeue_jobs"
)

var (
	//go:embed migrations/*.sql
	migrationFiles embed.FS
	//go:embed queries/*.sql
	queryFiles embed.FS
)

// PostgresMigrations returns the embedded migrations of the leasequeue
// tables in the file layout of golang-migrate (NNN_name.up.sql and
// NNN_name.down.sql), for its iofs source; PostgresGooseMigrations has
// the same SQL in goose's layout. They name the default tables
// public.leasequeue_jobs and public.leasequeue_jobs_members: keep
// PostgresOptions' names empty with them. MigratePostgres applies the
// same files itself, under any names.
func PostgresMigrations() fs.FS {
	return pgmigrate.Dir(migrationFiles, "migrations")
}

// PostgresGooseMigrations returns the migrations of PostgresMigrations in
// the layout of goose (github.com/pressly/goose/v3), for
// goose.NewProvider: one file per version (NNN_name.sql) holding the up
// file under "-- +goose Up" and the down file under "-- +goose Down". The
// files are built from those of PostgresMigrations, so the two never
// differ.
func PostgresGooseMigrations() fs.FS { return postgresGooseMigrations }

var postgresGooseMigrations = pgmigrate.MustGoose(PostgresMigrations())

// PostgresOptions name the leasequeue tables, and say how long a
// PostgresSource keeps finished items. The zero value names
// public.leasequeue_jobs (items) and public.leasequeue_jobs_members
// (rosters), and keeps the defaults of retention.
type PostgresOptions struct {
	// Schema holds the tables. Default DefaultPostgresSchema ("public").
	Schema string
	// Table is the items table. Default DefaultPostgresTable
	// ("leasequeue_jobs"). The roster table is Table + "_members", the
	// indexes of due and of finished items Table + "_due" and Table +
	// "_finished", and MigratePostgres records its versions in Table +
	// "_migrations", so Table is at most 52 bytes. Names are always
	// quoted, so any other characters are allowed.
	Table string

	// DoneRetention is how long a PostgresSource keeps a done item after
	// it was completed, on the database's clock, before Sweep removes it.
	// Default DefaultDoneRetention (24 hours); lease.KeepForever (any
	// negative value) keeps done items for good.
	DoneRetention time.Duration
	// DeadRetention is how long a PostgresSource keeps a dead item after
	// it went to the dead-letter state, as DoneRetention. Default
	// DefaultDeadRetention (7 days).
	DeadRetention time.Duration
}

// PostgresDB runs the statements of the PostgreSQL source and roster: a
// *pgxpool.Pool, a *pgx.Conn or a pgx.Tx. They never close it.
type PostgresDB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// pgNames holds the validated, quoted names of the leasequeue tables.
type pgNames struct {
	schema, table string // as given
	jobs          string // "schema"."table"
	members       string // "schema"."table_members"
	versions      string // "schema"."table_migrations"
	due           string // "table_due"
	finished      string // "table_finished"
}

func newPgNames(o PostgresOptions) (pgNames, error) {
	if o.Schema == "" {
		o.Schema = DefaultPostgresSchema
	}
	if o.Table == "" {
		o.Table = DefaultPostgresTable
	}
	if err := pgplumbing.CheckIdent(o.Schema); err != nil {
		return pgNames{}, fmt.Errorf("leasequeue: PostgresOptions.Schema %w", err)
	}
	if err := pgplumbing.CheckIdent(o.Table + "_migrations"); err != nil {
		return pgNames{}, fmt.Errorf("leasequeue: PostgresOptions.Table + \"_migrations\" %w", err)
	}
	return pgNames{
		schema:   o.Schema,
		table:    o.Table,
		jobs:     pgplumbing.Quote(o.Schema, o.Table),
		members:  pgplumbing.Quote(o.Schema, o.Table+"_members"),
		versions: pgplumbing.Quote(o.Schema, o.Table+"_migrations"),
		due:      pgplumbing.Quote(o.Table + "_due"),
		finished: pgplumbing.Quote(o.Table + "_finished"),
	}, nil
}

// defaultNames matches the default names in the embedded SQL: the two
// tables, schema-qualified, and the indexes.
var defaultNames = regexp.MustCompile(`\bpublic\.leasequeue_jobs(_members)?\b|\bleasequeue_jobs_(due|finished)\b`)

// render replaces the default names in embedded SQL with n's, dropping the
// lines that are whole comments.
func (n pgNames) render(sql string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(sql, "\n") {
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return defaultNames.ReplaceAllStringFunc(b.String(), func(m string) string {
		switch m {
		case "public.leasequeue_jobs":
			return n.jobs
		case "public.leasequeue_jobs_members":
			return n.members
		case "leasequeue_jobs_finished":
			return n.finished
		}
		return n.due
	})
}

func (n pgNames) query(name string) string {
	b, err := queryFiles.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic(err) // the files are embedded
	}
	return n.render(string(b))
}

// PostgresSource is a Source on a PostgreSQL table shared by any number
// of queues (see the package documentation for the table). Each request
// is one statement: a claim of ready items takes rows with FOR
// UPDATE SKIP LOCKED and records each claim on its row (token, holder,
// secret, expiry on the database's clock), and a completion or failure
// checks the row's fence in the statement that writes the outcome, so a
// Queue on it spends one statement to claim an item (or a share of one)
// and one to finish it, or a share of one: completions that overlap go
// out together, each item's fence checked as alone. Create the tables with MigratePostgres. It is
// safe for concurrent use.
//
// Tokens are bigints: completions and failures refuse a token of 2^63 or
// more with an error wrapping fence.ErrInvalid before any I/O, and, in
// the statement that would write it, a token more than fence.MaxTokenLead
// ahead of the database's clock, as fencepostgres.Tx does, with a
// *fence.ImplausibleTokenError, writing nothing. The claims pass over an
// item whose fence already holds such a token (see Source), so the token
// they compute never overflows.
type PostgresSource struct {
	db       PostgresDB
	queue    string
	queueArg any // queue as a statement's argument, boxed once
	n        pgNames

	complete, fail, item, enqueue                           string
	claim, claimOne, claimItem, renew, release, claimStateQ string
	completeBatch, prune                                    string

	retention retention
	batch     completer
}

var _ Source = (*PostgresSource)(nil)

// NewPostgresSource returns the source of queue on db. It does no I/O, so
// it is cheap to make one on a transaction, for example to enqueue items
// atomically with the writes that call for them.
func NewPostgresSource(db PostgresDB, queue string, o PostgresOptions) (*PostgresSource, error) {
	if db == nil {
		return nil, errors.New("leasequeue: NewPostgresSource: nil database")
	}
	if queue == "" {
		return nil, errors.New("leasequeue: NewPostgresSource: empty queue name")
	}
	n, err := newPgNames(o)
	if err != nil {
		return nil, err
	}
	return &PostgresSource{
		db: db, queue: queue, queueArg: queue, n: n,
		complete: n.query("complete"), fail: n.query("fail"), item: n.query("item"), enqueue: n.query("enqueue"),
		claim: n.query("claim"), claimOne: n.query("claim_one"), claimItem: n.query("claim_item"), renew: n.query("renew"),
		release: n.query("release"), claimStateQ: n.query("claim_state"), completeBatch: n.query("complete_batch"),
		prune: n.query("prune"), retention: newRetention(o.DoneRetention, o.DeadRetention),
	}, nil
}

// Table returns the quoted, schema-qualified name of the items table.
func (s *PostgresSource) Table() string { return s.n.jobs }

// Enqueue adds pending items with the given IDs, ready at once, and
// returns how many were added: IDs the queue already has, in any state,
// are left alone. A finished item is kept until Sweep removes it after
// its retention; from then on its ID is new again (see Sweep).
func (s *PostgresSource) Enqueue(ctx context.Context, ids ...string) (int, error) {
	tag, err := s.db.Exec(ctx, s.enqueue, s.queue, ids)
	if err != nil {
		return 0, pgError("enqueue into", s.queue, err)
	}
	return int(tag.RowsAffected()), nil
}

// Item returns the state of item id, or an error matching ErrNotFound.
func (s *PostgresSource) Item(ctx context.Context, id string) (Item, error) {
	it, _, err := s.readItem(ctx, s.db, id)
	return it, err
}

// readItem reads item id, and the largest plausible token at that moment
// (see maxLead).
func (s *PostgresSource) readItem(ctx context.Context, db PostgresDB, id string) (Item, int64, error) {
	var (
		it       = Item{ID: id}
		state    string
		key      *string
		token    *int64
		owner    *string
		lastErr  *string
		attempts int32
		largest  int64
	)
	err := db.QueryRow(ctx, s.item, s.queue, id, maxLead).Scan(&state, &attempts, &key, &token, &owner, &lastErr, &largest)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Item{}, 0, notFound(id)
	case err != nil:
		return Item{}, 0, pgError("read item", id, err)
	}
	it.State, it.Attempts = State(state), int(attempts)
	if key != nil {
		it.FenceKey = *key
	}
	if token != nil {
		it.Token = lease.Token(*token)
	}
	if owner != nil {
		it.Owner = *owner
	}
	if lastErr != nil {
		it.LastError = *lastErr
	}
	return it, largest, nil
}

// completeItem implements Source. Calls that overlap share a statement: one
// completion statement of the source is in flight at a time; a call that
// finds none in flight sends its own at once, and the calls that arrive
// meanwhile go out together, each item's fence checked as alone, as soon
// as it returns. Each call gets its own answer. One that stops waiting
// (its ctx ended) before its batch was sent returns ctx's error, nothing
// written; one whose batch was sent returns an error matching
// lease.ErrIndeterminate. A statement that hangs holds up the calls
// behind it until their contexts end.
func (s *PostgresSource) completeItem(ctx context.Context, snap lease.Snapshot, id string) error {
	return s.completeBatched(ctx, snap, id)
}

// failItem implements Source.
func (s *PostgresSource) failItem(ctx context.Context, snap lease.Snapshot, id string, f failRecord) error {
	state, text := Pending, ""
	if f.Dead {
		state = Dead
	}
	if f.Err != nil {
		text = f.Err.Error()
	}
	return s.finish(ctx, s.db, snap, id, s.fail, string(state), millis(f.RetryAfter), text)
}

// finish runs the fenced statement sql (complete or fail) on the running
// item id.
func (s *PostgresSource) finish(ctx context.Context, db PostgresDB, snap lease.Snapshot, id, sql string, more ...any) error {
	if err := checkToken(snap); err != nil {
		return err
	}
	args := append([]any{s.queueArg, id, snap.Key, int64(snap.Token), snap.Owner}, more...)
	tag, err := db.Exec(ctx, sql, append(args, maxLead)...)
	switch {
	case err != nil:
		return pgError("finish", id, err)
	case tag.RowsAffected() == 0:
		return s.refusal(ctx, db, snap, id)
	}
	return nil
}

// CompleteTx completes claim c with fn's writes: in one transaction on the
// source's database, it marks the item done (checking the fence first,
// which locks the row), runs fn, and commits. So the item is done exactly
// when fn's writes are committed, and a worker that lost its claim can
// neither complete the item nor commit fn's writes. If the fence refuses
// the claim, fn is not called. If fn fails, nothing of the transaction is
// written, the attempt is failed with fn's error as Claim.Fail would, and
// CompleteTx returns fn's error. Otherwise it returns what Claim.Complete
// returns. The claim is closed in every case.
func (s *PostgresSource) CompleteTx(ctx context.Context, c *Claim, fn func(pgx.Tx) error) error {
	return c.complete(ctx, func(ctx context.Context, snap lease.Snapshot) error {
		tx, err := s.db.Begin(ctx)
		if err != nil {
			return pgError("begin transaction for", c.id, err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := s.finish(ctx, tx, snap, c.id, s.complete); err != nil {
			return err
		}
		if fn != nil {
			if err := fn(tx); err != nil {
				_ = tx.Rollback(ctx)
				if ferr := s.failItem(ctx, snap, c.id, c.q.failure(c.attempt, err)); ferr != nil {
					return errors.Join(err, ferr)
				}
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return commitError(c.id, err)
		}
		return nil
	})
}

// refusal explains why a fenced statement on item id wrote nothing: snap's
// token is implausible, the fence refused snap, the item is unknown, or
// its state did not allow the write. A refusing fence wins over a
// finished item.
func (s *PostgresSource) refusal(ctx context.Context, db PostgresDB, snap lease.Snapshot, id string) error {
	it, largest, err := s.readItem(ctx, db, id)
	if err != nil {
		return err
	}
	// The read follows the statement, so its bound is at least the
	// statement's: a token above it was above the statement's too.
	if int64(snap.Token) > largest {
		return &fence.ImplausibleTokenError{Resource: keyspace.Tag(s.queue, id), Key: snap.Key, Token: snap.Token, Largest: lease.Token(largest)}
	}
	var stale error
	if it.FenceKey != "" {
		_, stale = fence.Mark{Key: it.FenceKey, Token: it.Token}.Admit(keyspace.Tag(s.queue, id), snap)
	}
	if stale != nil {
		return stale
	}
	return notRunning(id, it.State)
}

// checkToken refuses a token that does not fit a bigint, before any I/O.
// Tokens that fit but are implausible are refused by the statements, on
// the database's clock.
func checkToken(snap lease.Snapshot) error {
	if snap.Token == 0 || snap.Token > math.MaxInt64 {
		return fmt.Errorf("%w: token %d of lease %q is not between 1 and 2^63−1", fence.ErrInvalid, snap.Token, snap.Key)
	}
	return nil
}

// pgError explains an error of a statement: pgplumbing.Classify says whether
// it may have been applied (a FATAL error, whatever its translated
// severity, ended the session and may have).
//
// A refusal that no retry cures (a missing table or privilege, a pooler
// that lost a prepared statement: pgplumbing.ProblemOf) says what to
// change, and matches lease.ErrMisconfigured.
func pgError(op, name string, err error) error {
	if p := pgplumbing.ProblemOf(err); p != pgplumbing.NoProblem && pgplumbing.Classify(err) == applied.No {
		hint := p.Hint("leasequeue.MigratePostgres", "SELECT, INSERT, UPDATE, DELETE ON the items table and its _members table")
		return lease.Misconfigured(fmt.Errorf("leasequeue: postgres: %s %q (configuration: %s): %w", op, name, hint, err))
	}
	return pgplumbing.Classify(err).Mark(fmt.Errorf("leasequeue: postgres: %s %q: %w", op, name, err))
}

// commitError explains a failed COMMIT.
func commitError(id string, err error) error {
	switch {
	case pgplumbing.Classify(err) == applied.Unknown:
		return lease.Indeterminate(fmt.Errorf("leasequeue: postgres: complete %q: commit: %w", id, err))
	case pgconn.SafeToRetry(err):
		return fmt.Errorf("leasequeue: postgres: complete %q: commit not sent, nothing written: %w", id, err)
	}
	return fmt.Errorf("leasequeue: postgres: complete %q: commit refused, nothing written: %w", id, err)
}
