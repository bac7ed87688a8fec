package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golib/lease/internal/pgmigrate"
	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/lease"
)

// CheckReport is what Diagnose found.
type CheckReport struct {
	// Problems are settings, privileges or a table that make operations
	// fail or release notifications never arrive, each saying what to
	// change.
	Problems []error
	// Advice are settings that work but that an operator may want to
	// change, each saying why.
	Advice []string
}

// Err returns the problems as one error, or nil if there is none.
func (r CheckReport) Err() error {
	if err := errors.Join(r.Problems...); err != nil {
		return fmt.Errorf("leasepostgres: check: %w", err)
	}
	return nil
}

// Check asks the database whether the Store can work on it, and returns an
// error listing every problem found, or nil. It is Diagnose(ctx).Err();
// see Diagnose for what it looks at. Call it at start-up, after Migrate.
func (s *Store) Check(ctx context.Context) error { return s.Diagnose(ctx).Err() }

// exec is the exec mode of Diagnose's own statements: the unnamed
// statement, which works through every pooler, whatever the pool's default.
const exec = pgx.QueryExecModeExec

// poolerProbeTimeout bounds the wait of the pooler probe (see
// probeSession): a session of its own answers at once.
const poolerProbeTimeout = 3 * time.Second

// Diagnose asks the database whether the Store can work on it. It changes
// nothing: it reads catalogs and settings, and runs one Inspect. Problems
// are:
//
//   - the lease table missing, or lacking a column the statements use, or
//     the functions beside it that AcquirePermit, AcquireSet, RenewSet
//     and ReleaseSet call (migration 005) missing, or without EXECUTE for
//     the role;
//   - a versions table (Table + "_migrations", kept by Migrate) that lists
//     fewer migrations than this version of the package has;
//   - a role without USAGE on the schema, or without SELECT, INSERT or
//     UPDATE on the table; or without DELETE, unless Options.Retention is
//     lease.KeepForever: Sweep would fail, and the rows of ended leases
//     would never be removed;
//   - a read-only session, or a standby server;
//   - a connection pooler in transaction (or statement) mode while release
//     notifications are on with no ListenPool of their own: LISTEN needs a
//     session, so waiters would never be woken (they still poll every
//     Retry). Diagnose detects the pooler when, on a *pgxpool.Pool, two
//     statements of one client connection run on different server
//     backends while another client connection holds a transaction open;
//     a pooler that happens to hand the same backend back goes unnoticed.
//
// Advice covers idle_in_transaction_session_timeout (a transaction left
// open while it holds a guard's or a fence's row lock blocks the lease's
// renewal), lock_timeout and statement_timeout (a server-side limit just
// below the client's OperationTimeout turns a timed-out statement from an
// indeterminate outcome into a refused one), an UNLOGGED table, and pgx's
// prepared statements behind a transaction-mode pooler.
func (s *Store) Diagnose(ctx context.Context) CheckReport {
	var r CheckReport
	problem := func(format string, args ...any) {
		r.Problems = append(r.Problems, fmt.Errorf(format, args...))
	}
	advise := func(format string, args ...any) { r.Advice = append(r.Advice, fmt.Sprintf(format, args...)) }
	table := s.names.qualified

	var usage, readOnly, standby bool
	err := s.db.QueryRow(ctx, `SELECT has_schema_privilege($1::text, 'USAGE'),
       current_setting('transaction_read_only') = 'on', pg_is_in_recovery()`,
		exec, s.names.schema).Scan(&usage, &readOnly, &standby)
	if err != nil {
		if pgplumbing.Code(err) == pgplumbing.InvalidSchemaName {
			problem("schema %q does not exist: %s", s.names.schema, pgplumbing.MigrateHint(migrateFn))
			return r
		}
		problem("reading the catalog: %w", classify(err, table))
		return r
	}
	switch {
	case standby:
		problem("connected to a standby (pg_is_in_recovery): leases need the primary")
	case readOnly:
		problem("the session is read-only (transaction_read_only): leases need a writable primary")
	}
	if !usage {
		problem("the role lacks USAGE on schema %q: GRANT USAGE ON SCHEMA %s TO the role", s.names.schema, pgx.Identifier{s.names.schema}.Sanitize())
		s.checkSettings(ctx, &r)
		return r
	}
	var (
		exists, sel, ins, upd, del bool
		persistence                string
	)
	err = s.db.QueryRow(ctx, `SELECT to_regclass($1::text) IS NOT NULL,
       coalesce(has_table_privilege(to_regclass($1::text), 'SELECT'), false),
       coalesce(has_table_privilege(to_regclass($1::text), 'INSERT'), false),
       coalesce(has_table_privilege(to_regclass($1::text), 'UPDATE'), false),
       coalesce(has_table_privilege(to_regclass($1::text), 'DELETE'), false),
       coalesce((SELECT relpersistence::text FROM pg_catalog.pg_class WHERE oid = to_regclass($1::text)), '')`,
		exec, table).Scan(&exists, &sel, &ins, &upd, &del, &persistence)
	if err != nil {
		problem("reading the catalog: %w", classify(err, table))
		return r
	}
	if !exists {
		problem("lease table %s not found: %s, or apply leasepostgres.Migrations; check Options.Schema and Options.Table (leasectl: --schema, --table)", table, pgplumbing.MigrateHint(migrateFn))
	} else {
		var missing []string
		for _, p := range []struct {
			ok   bool
			name string
		}{{sel, "SELECT"}, {ins, "INSERT"}, {upd, "UPDATE"}} {
			if !p.ok {
				missing = append(missing, p.name)
			}
		}
		if len(missing) > 0 {
			problem("the role lacks %s on lease table %s: GRANT SELECT, INSERT, UPDATE ON %s TO the role", strings.Join(missing, ", "), table, table)
		}
		if !del && s.retention != lease.KeepForever {
			problem("the role lacks DELETE on lease table %s: the records of ended leases are never removed (Store.Sweep, which a lease.Client runs in the background, fails), so the table keeps a row per key ever used; GRANT DELETE ON %s TO the role, or set Options.Retention to lease.KeepForever", table, table)
		}
		s.checkColumns(ctx, &r)
		s.checkFunctions(ctx, &r)
		if persistence == "u" {
			advise("lease table %s is UNLOGGED: a crash of the database server or a failover empties it and frees every lease at once (tokens stay safe)", table)
		}
	}
	s.checkVersions(ctx, &r)
	if exists && sel {
		if _, err := s.Inspect(ctx, "leasepostgres-check"); err != nil {
			problem("%w", err)
		}
	}
	s.checkSettings(ctx, &r)
	s.checkPooler(ctx, &r)
	return r
}

// leaseColumns are the columns the statements use, with their types.
var leaseColumns = map[string]string{
	"key": "text", "owner": "text", "nonce": "text", "token": "bigint",
	"expires_at": "timestamp with time zone", "watched_until": "timestamp with time zone",
	"acquired_at": "timestamp with time zone", "renewed_at": "timestamp with time zone", "transitions": "bigint",
	"candidates": "text[]", "preferred": "text", "preferred_until": "timestamp with time zone",
	"preferred_at": "timestamp with time zone",
}

func (s *Store) checkColumns(ctx context.Context, r *CheckReport) {
	rows, err := s.db.Query(ctx, `SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
FROM pg_catalog.pg_attribute AS a
WHERE a.attrelid = to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped`, exec, s.names.qualified)
	if err != nil {
		r.Problems = append(r.Problems, fmt.Errorf("reading the columns of %s: %w", s.names.qualified, classify(err, s.names.qualified)))
		return
	}
	have := map[string]string{}
	for rows.Next() {
		var name, typ string
		if rows.Scan(&name, &typ) == nil {
			have[name] = typ
		}
	}
	rows.Close()
	var wrong []string
	for name, typ := range leaseColumns {
		if have[name] != typ {
			wrong = append(wrong, fmt.Sprintf("%s %s", name, typ))
		}
	}
	if len(wrong) > 0 {
		r.Problems = append(r.Problems, fmt.Errorf("lease table %s lacks columns %s: it was not created by this version's migrations; %s", s.names.qualified, strings.Join(slices.Sorted(slices.Values(wrong)), ", "), pgplumbing.MigrateHint(migrateFn)))
	}
}

// groupFunctions are the functions of migration 005 beside the lease
// table, by the suffix of their names and their argument types.
var groupFunctions = []struct{ suffix, args string }{
	{fnPermit, "text, text, text, interval, integer"},
	{fnSetAcquire, "text[], text, text, interval"},
	{fnSetRenew, "text[], text, bigint, interval"},
	{fnSetRelease, "text[], text, bigint, text"},
}

// checkFunctions reports the functions of migration 005 missing, or
// without EXECUTE for the role: AcquirePermit, AcquireSet, RenewSet and
// ReleaseSet would fail.
func (s *Store) checkFunctions(ctx context.Context, r *CheckReport) {
	var missing, denied []string
	for _, f := range groupFunctions {
		sig := pgplumbing.Quote(s.names.schema, s.names.table+f.suffix) + "(" + f.args + ")"
		var exists, execute bool
		err := s.db.QueryRow(ctx, `SELECT to_regprocedure($1::text) IS NOT NULL,
       coalesce(has_function_privilege(to_regprocedure($1::text), 'EXECUTE'), false)`, exec, sig).Scan(&exists, &execute)
		switch {
		case err != nil:
			r.Problems = append(r.Problems, fmt.Errorf("reading the functions of %s: %w", s.names.qualified, classify(err, s.names.qualified)))
			return
		case !exists:
			missing = append(missing, sig)
		case !execute:
			denied = append(denied, sig)
		}
	}
	if len(missing) > 0 {
		r.Problems = append(r.Problems, fmt.Errorf("lease table %s lacks the functions %s of migration 005, which semaphores and sets of keys call: %s", s.names.qualified, strings.Join(missing, ", "), pgplumbing.MigrateHint(migrateFn)))
	}
	if len(denied) > 0 {
		r.Problems = append(r.Problems, fmt.Errorf("the role lacks EXECUTE on %s, which semaphores and sets of keys call: GRANT EXECUTE ON FUNCTION %s TO the role", strings.Join(denied, ", "), strings.Join(denied, ", ")))
	}
}

func (s *Store) checkVersions(ctx context.Context, r *CheckReport) {
	ms, err := pgmigrate.Load(Migrations())
	if err != nil || len(ms) == 0 {
		return
	}
	latest := ms[len(ms)-1].Version
	var present bool
	var applied int
	err = s.db.QueryRow(ctx, `SELECT to_regclass($1::text) IS NOT NULL`, exec, s.names.versions).Scan(&present)
	if err != nil || !present {
		return // a table from a migration tool of the user's own: the columns decide
	}
	if err := s.db.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+s.names.versions, exec).Scan(&applied); err != nil {
		r.Advice = append(r.Advice, fmt.Sprintf("could not read the migration versions in %s: %v", s.names.versions, err))
		return
	}
	if applied < latest {
		r.Problems = append(r.Problems, fmt.Errorf("lease table %s is at migration %d, this version of the package needs %d: %s", s.names.qualified, applied, latest, pgplumbing.MigrateHint(migrateFn)))
	}
}

func (s *Store) checkSettings(ctx context.Context, r *CheckReport) {
	var idle, lock, stmt string
	err := s.db.QueryRow(ctx, `SELECT current_setting('idle_in_transaction_session_timeout'), current_setting('lock_timeout'), current_setting('statement_timeout')`, exec).Scan(&idle, &lock, &stmt)
	if err != nil {
		return
	}
	if idle == "0" {
		r.Advice = append(r.Advice, "idle_in_transaction_session_timeout is 0: a transaction left open while it holds a lease row (CheckGuard locks it FOR SHARE) blocks that lease's renewal and release until it ends, and the holder loses the lease; set it for the application's role, shorter than the lease TTL (ALTER ROLE … SET idle_in_transaction_session_timeout = '10s')")
	}
	if lock == "0" && stmt == "0" {
		r.Advice = append(r.Advice, "lock_timeout and statement_timeout are 0: a lease statement waiting for a row lock ends only when the client's OperationTimeout cancels it, and its outcome is then unknown; a lock_timeout a little below OperationTimeout makes the server refuse it instead, which is known not to have applied")
	}
}

// checkPooler looks for a connection pooler in transaction or statement
// mode between the Store and the database.
func (s *Store) checkPooler(ctx context.Context, r *CheckReport) {
	pool, ok := s.db.(*pgxpool.Pool)
	if !ok {
		return // one connection or a transaction: nothing to compare
	}
	mode := ""
	if transactional, err := probeSession(ctx, pool); err != nil {
		r.Advice = append(r.Advice, fmt.Sprintf("could not probe for a connection pooler: %v", err))
	} else if transactional {
		mode = "pool"
	}
	if lp, ok := s.lisPool.(*pgxpool.Pool); ok && lp != pool && s.channel != "" {
		if transactional, err := probeSession(ctx, lp); err == nil && transactional {
			r.Problems = append(r.Problems, errors.New("Options.ListenPool goes through a connection pooler in transaction mode: LISTEN needs a session, so waiters are never woken; point it at the database directly (or at a pooler in session mode)"))
		}
	}
	if mode == "" {
		return
	}
	switch {
	case s.channel == "":
		r.Advice = append(r.Advice, "the pool goes through a connection pooler in transaction or statement mode; release notifications are off (DisableNotify), so waiters poll every Retry: fine")
	case s.lisPool == pooled(pool) || s.lisPool == nil:
		r.Problems = append(r.Problems, errors.New("the pool goes through a connection pooler in transaction or statement mode (statements of one connection ran on different server sessions): LISTEN needs a session, so release notifications would never reach waiters; set Options.ListenPool to a pool that connects to the database directly, or Options.DisableNotify"))
	}
	if pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		r.Advice = append(r.Advice, "the pool uses pgx's default exec mode (named prepared statements) behind a transaction-mode pooler: "+pgplumbing.PoolerHint)
	}
}

// probeSession reports whether two statements on one client connection of
// pool can run on different server sessions: it notes the server backend of
// connection A, opens a transaction on connection B (a transaction-mode
// pooler that reuses backends, as PgBouncer does, hands B the backend A
// just used), and asks A again. In session mode A keeps its backend; a
// different one, or no answer while B's transaction pins the pooler's
// only backend, means a pooler in transaction mode, and a refused
// transaction block a pooler in statement mode.
func probeSession(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	a, err := pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer a.Release()
	b, err := pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer b.Release()
	var before, after, other int32
	if err := a.QueryRow(ctx, "SELECT pg_backend_pid()", exec).Scan(&before); err != nil {
		return false, err
	}
	tx, err := b.Begin(ctx)
	if err == nil {
		defer tx.Rollback(context.WithoutCancel(ctx))
		err = tx.QueryRow(ctx, "SELECT pg_backend_pid()", exec).Scan(&other)
	}
	if err != nil {
		if strings.Contains(err.Error(), "statement pooling") {
			return true, nil // PgBouncer in statement mode refuses transaction blocks
		}
		return false, err
	}
	wait, cancel := context.WithTimeout(ctx, poolerProbeTimeout)
	defer cancel()
	err = a.QueryRow(wait, "SELECT pg_backend_pid()", exec).Scan(&after)
	if err != nil {
		if wait.Err() != nil && ctx.Err() == nil {
			return true, nil // pgx closes the connection; Release drops it
		}
		return false, err
	}
	return before != after, nil
}
