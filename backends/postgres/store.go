package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/golib/lease/guard"
	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/lease"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is what a Store runs its statements on: a *pgxpool.Pool, a *pgx.Conn
// or a pgx.Tx all satisfy it. The Store never closes it, and never begins
// a transaction on it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// pooled is the part of *pgxpool.Pool that lets a Store take a connection
// itself, so that a failure to get one is known not to have sent anything,
// and that gives the release listener its connection.
type pooled interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// Options configure a Store and Migrate. The zero value uses the table
// public.leases with release notifications on.
type Options struct {
	// Schema holds the lease table. Default "public". Any name is allowed
	// (it is quoted), up to 63 bytes.
	Schema string

	// Table is the lease table's name. Default "leases". Any name is
	// allowed (it is quoted), up to 52 bytes: Migrate keeps its versions
	// in a table named Table + "_migrations" beside it.
	Table string

	// Unlogged makes Migrate create the table UNLOGGED (or convert an
	// existing one): no write-ahead log, so acquire and release commit
	// without waiting for the disk, but after a crash of the database server, and on a
	// failover to a replica, the table is empty and every holder is
	// forgotten. Tokens stay safe for fencing, because they are seeded
	// from the database's clock. Default false. Only Migrate reads it.
	Unlogged bool

	// DisableNotify turns off release notifications: Release never calls
	// pg_notify, and waiting through LISTEN is off (WatchReleases returns
	// an error, so Client.Acquire polls). Set it
	// when the notifications are not wanted, for example behind a
	// connection pooler in transaction mode without a ListenPool. Default
	// false.
	DisableNotify bool

	// AsyncCommit makes acquire, renew and release commit with
	// synchronous_commit off, set inside each statement (no extra round
	// trip, and nothing stays set on the connection afterwards): the
	// database acknowledges them before their WAL reaches the disk, which
	// on a durable server (fsync on) saves each operation a WAL flush. The
	// price is on a crash of the database server (not of a client): the
	// operations acknowledged in the last moments before it (at most three
	// times wal_writer_delay, which is 200ms by default) are lost. A holder
	// may then find its grant or its last renewal undone: the database
	// lets another replica acquire the key while the holder's local
	// deadline still runs, so for a while two replicas may both believe
	// they hold it, until the old holder's next renewal fails with
	// lease.ErrLost. A released key may show held again until its TTL
	// passes. Tokens stay safe for fencing, as after any loss of the
	// table's data: the next grant's token is seeded from the database's
	// clock, so it is higher than a lost one, and fenced writes keep the
	// two holders apart; unfenced work does not. The commit no longer
	// waits for synchronous standbys either, so a failover may lose the
	// same. On a pgx.Tx the setting covers that whole transaction, the
	// caller's other writes included. Default false.
	AsyncCommit bool

	// Retention is how long Sweep keeps the row of a lease after the lease
	// ended (was released, expired, or was force-released), measured on
	// the database's clock from the end. While the row is kept, Inspect
	// and List show the key's last token, and an ended holder's Renew and
	// Release say how it ended; once Sweep has removed it, they find no
	// record (lease.RecordLost), and the key's next token is still above
	// the last one, because tokens are seeded from the database's clock
	// (see the package documentation), as long as the clock does not step
	// back by more than Retention. Default (0) lease.DefaultRetention;
	// lease.KeepForever keeps every row, and Sweep then removes nothing.
	// Other negative values are an error. It is kept in whole microseconds,
	// rounded up.
	Retention time.Duration

	// ListenPool is where the release listener takes its one dedicated
	// connection from, while some Client.Acquire is waiting. Default: the
	// db given to New, if it is a *pgxpool.Pool; otherwise waiters poll.
	// Behind a connection pooler in transaction mode, LISTEN needs a pool
	// that connects to the database directly.
	ListenPool *pgxpool.Pool
}

// Store is a lease.Backend on a PostgreSQL table. It is safe for
// concurrent use. Create it with New; call Close when done to stop the
// release listener.
type Store struct {
	db        DB
	pool      pooled // db as a pool, or nil
	names     names
	q         queries
	retention time.Duration // lease.KeepForever, or positive
	channel   string        // release notifications, or "" when disabled

	lisPool pooled        // where the listener's connection comes from, or nil
	idle    time.Duration // listenIdle, or shorter in tests

	// ctx is cancelled by Close; the listener and its helpers run under it.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	w      watchers // release watches and their listener
	closed bool
}

var (
	_ lease.Backend        = (*Store)(nil)
	_ lease.ReleaseWatcher = (*Store)(nil)
	_ lease.ChangeWatcher  = (*Store)(nil)
	_ lease.HandOffer      = (*Store)(nil)
)

// New returns a Store that runs its statements on db, a *pgxpool.Pool, a
// *pgx.Conn, a pgx.Tx or anything else with their Exec, Query and
// QueryRow methods. It does no I/O: the table must exist already (see
// Migrate). The Store never closes db.
//
// On a *pgx.Conn or a pgx.Tx, which run one statement at a time, the
// caller must not use db concurrently with the Store; a pool has no such
// limit.
func New(db DB, o Options) (*Store, error) {
	if db == nil {
		return nil, errors.New("leasepostgres: New: nil DB")
	}
	n, err := newNames(o.Schema, o.Table)
	if err != nil {
		return nil, err
	}
	retention := o.Retention
	switch {
	case retention == 0:
		retention = lease.DefaultRetention
	case retention < 0 && retention != lease.KeepForever:
		return nil, fmt.Errorf("leasepostgres: New: Retention %v is negative (use lease.KeepForever to keep rows for good)", o.Retention)
	}
	s := &Store{db: db, names: n, q: newQueries(n, o.AsyncCommit), retention: retention, idle: listenIdle}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.pool, _ = db.(pooled)
	if !o.DisableNotify {
		s.channel = channelName(n.qualified)
		if o.ListenPool != nil {
			s.lisPool = o.ListenPool
		} else {
			s.lisPool = s.pool
		}
	}
	return s, nil
}

// channelName returns the LISTEN/NOTIFY channel of a lease table: a short
// name derived from the quoted qualified table name, so that it fits the
// 63-byte limit whatever the table is called.
func channelName(qualified string) string {
	sum := sha256.Sum256([]byte(qualified))
	return "lease_released_" + hex.EncodeToString(sum[:8])
}

// addr returns where the Store's pool connects, for errors: host:port, or
// "the database server" when db is not a *pgxpool.Pool. It is called only
// once a connection failed, as reading a pool's configuration copies it.
func (s *Store) addr() string {
	if p, ok := s.db.(*pgxpool.Pool); ok {
		return pgplumbing.Addr(&p.Config().ConnConfig.Config)
	}
	return "the database server"
}

// Table returns the quoted, schema-qualified name of the lease table, as
// it appears in the Store's statements.
func (s *Store) Table() string { return s.names.qualified }

// Close stops the release listener, if one is running, and returns its
// connection to the pool. It does not close the DB given to New. Methods
// other than WatchReleases keep working after Close.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.stopListener()
	return nil
}

// queryRow runs one statement and scans its single result row into dest.
// It reports whether there was a row. Errors are classified.
func (s *Store) queryRow(ctx context.Context, sql string, args []any, dest ...any) (bool, error) {
	db := s.db
	if s.pool != nil {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			return false, s.notSent(err)
		}
		defer c.Release()
		db = c
	}
	err := db.QueryRow(ctx, sql, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, classify(err, s.names.qualified)
	}
	return true, nil
}

// ttlInterval converts a TTL to an interval, rounding up to whole
// microseconds, the resolution of a PostgreSQL interval.
func ttlInterval(ttl time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: int64((ttl + time.Microsecond - 1) / time.Microsecond), Valid: true}
}

// duration converts an interval the statements return (a difference of
// timestamps: days and microseconds, never months) to a duration that is
// never negative.
func duration(v pgtype.Interval) time.Duration {
	d := time.Duration(v.Days)*24*time.Hour + time.Duration(v.Microseconds)*time.Microsecond
	return max(d, 0)
}

// remaining converts microseconds left, as the admin statements return
// them, to a duration that is never negative.
func remaining(us int64) time.Duration {
	return max(time.Duration(us)*time.Microsecond, 0)
}

// Acquire implements lease.Backend in one statement (queries/acquire.sql):
// an upsert that takes the key's row over only if it has expired on the
// database's clock, or extends it if r.Nonce holds it, and otherwise
// leaves it as it is and returns the holder. While a hand-off's offer
// stands (see HandOff), only a candidate is granted the key, with the
// offered token; anyone else gets a *lease.NotAcquiredError with the
// candidates. With r.Preferred it runs queries/acquirepreferred.sql
// instead, which also records r.Owner as the key's preferred candidate
// when another acquisition holds it. A grant to a new acquisition, and a
// new preferred candidate, notify change watchers (WatchChanges) if one
// marked the key.
func (s *Store) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	if r.TTL <= 0 {
		return 0, fmt.Errorf("leasepostgres: acquire: TTL %v is not positive", r.TTL)
	}
	c := &acquireCall{key: textArg(r.Key), owner: textArg(r.Owner), nonce: textArg(r.Nonce), ttl: ttlInterval(r.TTL), channel: textArg(s.channel)}
	c.args = [...]any{&c.key, &c.owner, &c.nonce, &c.ttl, &c.channel}
	c.dest = [...]any{&c.granted, &c.token, &c.holder, &c.left, &c.candidates, nil}
	sql := s.q.acquire
	if r.Preferred {
		sql = s.q.acquirePreferred
	}
	ok, err := s.queryRow(ctx, sql, c.args[:], c.dest[:5+s.q.extra]...)
	granted, token, holder, left := c.granted, c.token, c.holder, c.left
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return 0, errors.New("leasepostgres: acquire: the statement returned no row")
	case !granted && c.candidates.Valid:
		return 0, &lease.NotAcquiredError{Key: r.Key, Token: lease.Token(token), Remaining: duration(left),
			Candidates: strings.Split(c.candidates.String, candidateSep)}
	case !granted:
		return 0, &lease.NotAcquiredError{Key: r.Key, Holder: holder, Token: lease.Token(token), Remaining: duration(left)}
	case token <= 0:
		return 0, fmt.Errorf("leasepostgres: acquire: table %s returned token %d", s.names.qualified, token)
	}
	return lease.Token(token), nil
}

// acquireCall holds the arguments and results of one acquire.sql, so that
// the call allocates once: pgx gets pointers into it (see textArg).
type acquireCall struct {
	key, owner, nonce, channel textArg
	ttl                        pgtype.Interval
	granted                    bool
	token                      int64
	holder                     string
	left                       pgtype.Interval
	candidates                 pgtype.Text // of a standing offer that refused the request, joined by candidateSep
	args                       [5]any
	dest                       [6]any // the last one nil: a column to skip (queries.extra)
}

// candidateSep joins the candidates that acquire.sql returns: owner
// strings hold no control character (lease.ValidateOwner).
const candidateSep = "\x01"

// outcomeCall is acquireCall for renew.sql ($4 ttl) and release.sql ($4
// channel).
type outcomeCall struct {
	key, nonce, channel textArg
	token               int8Arg
	ttl                 pgtype.Interval
	outcome             int32
	args                [4]any
	dest                [2]any // the last one nil, as in acquireCall
}

// Outcomes of renew.sql and release.sql.
const (
	outcomeDone          = 0
	outcomeExpired       = 1
	outcomeSuperseded    = 2
	outcomeForceReleased = 3
	outcomeHandedOff     = 4
	outcomeNoRow         = -1 // no row (never acquired, lost, or swept): the statement returned nothing
)

// lostReasons maps the outcomes of renew.sql, release.sql and
// forcerelease.sql that end in a *lease.LostError to its reason.
var lostReasons = map[int32]lease.LostReason{
	outcomeExpired:       lease.Expired,
	outcomeSuperseded:    lease.Superseded,
	outcomeForceReleased: lease.ForceReleased,
	outcomeHandedOff:     lease.HandedOff,
	outcomeNoRow:         lease.RecordLost,
}

// lost converts the outcome of renew.sql or release.sql to an error.
func lost(a lease.Acquisition, outcome int32) error {
	if outcome == outcomeDone {
		return nil
	}
	if reason, ok := lostReasons[outcome]; ok {
		return &lease.LostError{Key: a.Key, Token: a.Token, Reason: reason}
	}
	return fmt.Errorf("leasepostgres: unexpected outcome %d", outcome)
}

// Renew implements lease.Backend in one statement (queries/renew.sql).
func (s *Store) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("leasepostgres: renew: TTL %v is not positive", ttl)
	}
	c := &outcomeCall{key: textArg(a.Key), nonce: textArg(a.Nonce), token: int8Arg(a.Token), ttl: ttlInterval(ttl)}
	c.args = [...]any{&c.key, &c.nonce, &c.token, &c.ttl}
	c.dest = [...]any{&c.outcome, nil}
	ok, err := s.queryRow(ctx, s.q.renew, c.args[:], c.dest[:1+s.q.extra]...)
	if err != nil {
		return err
	}
	if !ok { // the key has no row
		c.outcome = outcomeNoRow
	}
	return lost(a, c.outcome)
}

// Release implements lease.Backend in one statement (queries/release.sql).
// The row stays, with its expiry set a thousand years before the release
// (long past, yet the time of the release is known), until Sweep removes
// it a retention later.
// If a waiter marked the key (see WatchReleases), the statement also
// notifies waiting acquirers when it commits.
func (s *Store) Release(ctx context.Context, a lease.Acquisition) error {
	c := &outcomeCall{key: textArg(a.Key), nonce: textArg(a.Nonce), token: int8Arg(a.Token), channel: textArg(s.channel)}
	c.args = [...]any{&c.key, &c.nonce, &c.token, &c.channel}
	c.dest = [...]any{&c.outcome, nil}
	ok, err := s.queryRow(ctx, s.q.release, c.args[:], c.dest[:1+s.q.extra]...)
	if err != nil {
		return err
	}
	if !ok { // the key has no row
		c.outcome = outcomeNoRow
	}
	return lost(a, c.outcome)
}

// Inspect implements lease.Backend in one statement (queries/inspect.sql).
func (s *Store) Inspect(ctx context.Context, key string) (lease.Record, error) {
	var (
		held  bool
		owner string
		token int64
		left  pgtype.Interval
		h     history
	)
	rec := lease.Record{Key: key}
	ok, err := s.queryRow(ctx, s.q.inspect, []any{key}, &held, &owner, &token, &left,
		&h.acquired, &h.renewed, &h.transitions, &h.candidates, &h.ending, &h.preferred)
	if err != nil || !ok {
		return rec, err
	}
	rec.Token = lease.Token(token)
	if held || len(h.candidates) > 0 {
		rec.Held, rec.Owner, rec.Remaining = held, owner, duration(left)
	}
	h.fill(&rec)
	return rec, nil
}

// history holds the acquired_at, renewed_at and transitions columns of a
// row, as the admin statements return them (the times are NULL in a row
// that no acquire has written since migration 004 added them), and the
// columns of a hand-off and a preferred candidate as inspect.sql and
// list.sql derive them.
type history struct {
	acquired, renewed pgtype.Timestamptz
	transitions       int64
	candidates        []string // of a standing offer, else nil
	ending            int32    // a lease.Ending
	preferred         *string  // NULL if none
}

// fill sets rec's history fields, and those of a hand-off and a preferred
// candidate.
func (h *history) fill(rec *lease.Record) {
	if h.acquired.Valid {
		rec.AcquiredAt = h.acquired.Time
	}
	if h.renewed.Valid {
		rec.RenewedAt = h.renewed.Time
	}
	rec.Transitions = uint64(max(h.transitions, 0))
	if len(h.candidates) > 0 {
		rec.Candidates = h.candidates
	}
	if h.ending >= 0 && h.ending <= int32(lease.EndHandedOff) {
		rec.Ending = lease.Ending(h.ending)
	}
	if h.preferred != nil {
		rec.Preferred = *h.preferred
	}
}

// Guard returns the coordinates of the acquisition snap in this Store's
// table, for a transaction that must write only while that acquisition
// holds the lease. Check it with CheckGuard inside the transaction.
func (s *Store) Guard(snap lease.Snapshot) (guard.Guard, error) {
	return guard.New(guard.Postgres, s.names.qualified, snap)
}
