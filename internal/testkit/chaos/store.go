package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	sq "github.com/Masterminds/squirrel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencecolumn"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/lease"
)

// A Store holds fenced resources: each has a value, written only through
// package fence, and a fence mark.
type Store interface {
	// Write sets the resource's value under snap's token, through the
	// fence; an empty value claims the resource without writing (it
	// advances the fence only). A refused token comes back as a
	// *fence.StaleError.
	Write(ctx context.Context, snap lease.Snapshot, resource, value string) error
	// Read returns the resource's fence mark and value, read in one atomic
	// step. A resource never written reads as 0 and "".
	Read(ctx context.Context, resource string) (lease.Token, string, error)
}

// Write is one fenced write for RecordingStore.Write.
type Write struct {
	Snap     lease.Snapshot
	Acq      string // AcqID of the acquisition, for the deadline check
	Resource string
	// Value is written; empty claims the resource.
	Value string
	// Lease is the key of the handle the write is made under when the
	// snapshot's key is not it (see Op.Lease); Fence says how a write
	// under a permit or a set is fenced (see Op.Fence).
	Lease, Fence string
	// Late marks a write made on purpose with a snapshot held across a
	// pause (see Op.Late).
	Late bool
	// Remaining, if not nil, returns how long the client believes it
	// still holds the lease; it is sampled just before the write.
	Remaining func() time.Duration
}

// RecordingStore records the writes and reads of a Store.
type RecordingStore struct {
	s   Store
	rec *Recorder
}

// NewRecordingStore returns s recording into rec.
func NewRecordingStore(s Store, rec *Recorder) *RecordingStore {
	return &RecordingStore{s: s, rec: rec}
}

// Write makes the fenced write w on lane and records it. It returns the
// outcome and the error.
func (r *RecordingStore) Write(ctx context.Context, lane *Lane, w Write) (Outcome, error) {
	op := Op{Lane: lane.ID(), Kind: KindWrite, Key: w.Snap.Key, Acq: w.Acq, Token: uint64(w.Snap.Token),
		Resource: w.Resource, Value: w.Value, Claim: w.Value == "", Late: w.Late, Fence: w.Fence, Call: r.rec.Now()}
	if w.Lease != w.Snap.Key {
		op.Lease = w.Lease
	}
	if w.Remaining != nil {
		op.Remaining = micros(w.Remaining())
		op.SampledBy = r.rec.Now()
	}
	err := r.s.Write(ctx, w.Snap, w.Resource, w.Value)
	op.Return = r.rec.Now()
	op.Err = errText(err)
	var stale *fence.StaleError
	switch {
	case err == nil:
		op.Outcome = OK
	case errors.As(err, &stale):
		op.Outcome, op.Out = Stale, uint64(stale.Current)
	case errors.Is(err, lease.ErrIndeterminate):
		op.Outcome = Unknown
	default:
		op.Outcome = Failed
	}
	lane.record(r.rec, op)
	return op.Outcome, err
}

// Read reads resource on lane and records it.
func (r *RecordingStore) Read(ctx context.Context, lane *Lane, resource string) (lease.Token, string, error) {
	op := Op{Lane: lane.ID(), Kind: KindRead, Resource: resource, Call: r.rec.Now()}
	mark, value, err := r.s.Read(ctx, resource)
	op.Return = r.rec.Now()
	op.Err = errText(err)
	if err == nil {
		op.Outcome, op.Out, op.Value = OK, uint64(mark), value
	} else {
		op.Outcome = Failed // a read changes nothing; its outcome never matters
	}
	lane.record(r.rec, op)
	return mark, value, err
}

// MemoryStore keeps resources in process memory, fenced by a fence.Memory.
// The zero value is ready to use.
type MemoryStore struct {
	mu     sync.Mutex
	f      fence.Memory
	values map[string]string
}

// Write implements Store.
func (s *MemoryStore) Write(_ context.Context, snap lease.Snapshot, resource, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var write func() error
	if value != "" {
		write = func() error {
			if s.values == nil {
				s.values = make(map[string]string)
			}
			s.values[resource] = value
			return nil
		}
	}
	return s.f.Do(snap, []string{resource}, write)
}

// Read implements Store.
func (s *MemoryStore) Read(_ context.Context, resource string) (lease.Token, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Mark(resource).Token, s.values[resource], nil
}

// ValkeyStore keeps resources on Valkey: the fence key of package fence
// and a value key in the same hash slot.
type ValkeyStore struct {
	c      valkey.Client
	f      *fencevalkey.Fence
	prefix string
}

// NewValkeyStore returns a store on c whose keys start with prefix.
func NewValkeyStore(c valkey.Client, prefix string) (*ValkeyStore, error) {
	f, err := fencevalkey.New(c, fencevalkey.Options{Prefix: prefix + "fence:"})
	if err != nil {
		return nil, err
	}
	return &ValkeyStore{c: c, f: f, prefix: prefix}, nil
}

func (s *ValkeyStore) valueKey(resource string) string { return s.prefix + "{" + resource + "}:value" }

// Write implements Store.
func (s *ValkeyStore) Write(ctx context.Context, snap lease.Snapshot, resource, value string) error {
	var cmds []fencevalkey.Command
	if value != "" {
		cmds = append(cmds, fencevalkey.Set(s.valueKey(resource), value, fencevalkey.SetOptions{}))
	}
	_, err := s.f.Do(ctx, snap, resource, cmds...)
	return err
}

// readScript reads a resource's mark and value: the fence's token, or,
// once the fence retired, the floor of its lease key in the resource's
// slot, which carries the token the fence had accepted (a resource of
// the harness is fenced by one lease key, whose only resource it is).
var readScript = valkey.NewLuaScriptReadOnly(`
local t = redis.call('HGET', KEYS[1], 'token') or redis.call('HGET', KEYS[3], 'token')
local v = redis.call('GET', KEYS[2])
return {t or '0', v or ''}`, valkey.WithLoadSHA1(true))

// Read implements Store.
func (s *ValkeyStore) Read(ctx context.Context, resource string) (lease.Token, string, error) {
	keys := []string{s.f.FenceKey(resource), s.valueKey(resource), s.f.FloorKey(resource, leaseKeyOf(resource))}
	vals, err := readScript.Exec(ctx, s.c, keys, nil).AsStrSlice()
	if err != nil {
		return 0, "", err
	}
	if len(vals) != 2 {
		return 0, "", fmt.Errorf("chaos: read %q: %d values", resource, len(vals))
	}
	mark, err := strconv.ParseUint(vals[0], 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("chaos: read %q: mark %q: %w", resource, vals[0], err)
	}
	return lease.Token(mark), vals[1], nil
}

// leaseKeyOf returns the lease key that fences resource (see Resource).
func leaseKeyOf(resource string) string { return strings.TrimPrefix(resource, "res-") }

// PostgresStore keeps resources in PostgreSQL: the fences table of
// package fence and a table of values, chaos_values.
type PostgresStore struct {
	db *pgxpool.Pool

	// InTx, if not nil, is called inside the fenced transaction of a
	// write of a value, after the write, with the fence's row lock held.
	InTx func()
}

// MigratePostgres creates the fences table and the table of values.
func MigratePostgres(ctx context.Context, db *pgxpool.Pool) error {
	if err := fencepostgres.Migrate(ctx, db, fencepostgres.TableOptions{}); err != nil {
		return err
	}
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS chaos_values (resource text PRIMARY KEY, value text NOT NULL)`)
	return err
}

// NewPostgresStore returns a store on db; run MigratePostgres first.
func NewPostgresStore(db *pgxpool.Pool) *PostgresStore { return &PostgresStore{db: db} }

// Write implements Store.
func (s *PostgresStore) Write(ctx context.Context, snap lease.Snapshot, resource, value string) error {
	return s.write(ctx, s.db, snap, resource, value)
}

// write makes the fenced write in a transaction on db, which may be a
// transaction itself (fencepostgres.Tx then uses a savepoint).
func (s *PostgresStore) write(ctx context.Context, db fencepostgres.Beginner, snap lease.Snapshot, resource, value string) error {
	var fn func(pgx.Tx) error
	if value != "" {
		fn = func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO chaos_values (resource, value) VALUES ($1, $2)
				ON CONFLICT (resource) DO UPDATE SET value = excluded.value`, resource, value)
			if err == nil && s.InTx != nil {
				s.InTx()
			}
			return err
		}
	}
	return fencepostgres.Tx(ctx, db, snap, []string{resource}, fn)
}

// Read implements Store.
func (s *PostgresStore) Read(ctx context.Context, resource string) (lease.Token, string, error) {
	var (
		mark  int64
		value string
	)
	// The fence's token or, once it retired, the floor of its lease key,
	// which carries the token the fence had accepted (a resource of the
	// harness is fenced by one lease key, whose only resource it is).
	err := s.db.QueryRow(ctx, `SELECT coalesce((SELECT token FROM public.lease_fences WHERE resource = $1),
			(SELECT token FROM public.lease_fences_floors WHERE lease_key = $2), 0),
		coalesce((SELECT value FROM chaos_values WHERE resource = $1), '')`, resource, leaseKeyOf(resource)).Scan(&mark, &value)
	if err != nil {
		return 0, "", err
	}
	return lease.Token(mark), value, nil
}

// GuardedPostgresStore is a PostgresStore whose writes run in a guard
// transaction: the transaction checks with leasepostgres.CheckGuard that
// the lease record still shows the writer's acquisition (and locks it FOR
// SHARE), then makes the fenced write with fencepostgres.Tx inside it (a
// savepoint), then commits.
//
// Its InTx hook (of PostgresStore) runs with the guard's and the fence's
// row locks held.
type GuardedPostgresStore struct {
	PostgresStore
	leases *leasepostgres.Store
}

// NewGuardedPostgresStore returns a store on db whose guards are checked
// against the lease table of leases.
func NewGuardedPostgresStore(db *pgxpool.Pool, leases *leasepostgres.Store) *GuardedPostgresStore {
	return &GuardedPostgresStore{PostgresStore: PostgresStore{db: db}, leases: leases}
}

// Write implements Store. A guard that no longer holds comes back as a
// *guard.NotCurrentError, recorded as Failed: nothing was written.
func (s *GuardedPostgresStore) Write(ctx context.Context, snap lease.Snapshot, resource, value string) error {
	g, err := s.leases.Guard(snap)
	if err != nil {
		return err
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("chaos: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := leasepostgres.CheckGuard(ctx, tx, g); err != nil {
		return err
	}
	if err := s.PostgresStore.write(ctx, tx, snap, resource, value); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		// The outcome of a COMMIT that got no answer is unknown.
		if pgconn.SafeToRetry(err) {
			return fmt.Errorf("chaos: commit not sent: %w", err)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.SeverityUnlocalized != "FATAL" && pgErr.SeverityUnlocalized != "PANIC" {
			return fmt.Errorf("chaos: commit refused: %w", err)
		}
		return lease.Indeterminate(fmt.Errorf("chaos: commit: %w", err))
	}
	return nil
}

// ColumnStore keeps resources as rows of a table of its own,
// chaos_rows, fenced by fence columns on the row itself: fencecolumn.Update and
// fencecolumn.Upsert write them. Every write picks one of many shapes of WHERE
// clause (OR, NOT, nested parentheses, raw strings, sq.Or, sq.Expr), each
// matching exactly the resource's row, so that a fence predicate that is
// not one unit with the caller's WHERE clause lets a refused token through.
type ColumnStore struct {
	db    *pgxpool.Pool
	rng   *rand.Rand
	mu    sync.Mutex
	shape int // -1: a random one for each write
}

// WhereShapes is the number of shapes of WHERE clause ColumnStore uses.
const WhereShapes = 8

// FixShape makes every write use fencecolumn.Update with WHERE shape i
// (0 ≤ i < WhereShapes), or with i = WhereShapes fencecolumn.Upsert for every
// write of a value; -1 goes back to random choices.
func (s *ColumnStore) FixShape(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shape = i
}

// columns are the fence columns of chaos_rows.
var columns = fencecolumn.Column{Token: "fence_token", Key: "fence_key"}

// MigrateColumns creates chaos_rows with a row, not fenced yet, for each
// resource: fencecolumn.Update writes only rows that exist.
func MigrateColumns(ctx context.Context, db *pgxpool.Pool, resources []string) error {
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS chaos_rows (resource text PRIMARY KEY,
		value text NOT NULL DEFAULT '', fence_key text, fence_token bigint)`)
	if err != nil {
		return err
	}
	_, err = db.Exec(ctx, `INSERT INTO chaos_rows (resource) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`, resources)
	return err
}

// NewColumnStore returns a store on db; run MigrateColumns first.
func NewColumnStore(db *pgxpool.Pool, seed uint64) *ColumnStore {
	return &ColumnStore{db: db, rng: rand.New(rand.NewPCG(seed, 0xc01)), shape: -1}
}

// where returns a WHERE clause that matches exactly the row of resource.
func (s *ColumnStore) where(resource string) sq.Sqlizer {
	s.mu.Lock()
	n := s.shape
	if n < 0 {
		n = s.rng.IntN(WhereShapes)
	}
	s.mu.Unlock()
	none := "none:" + resource
	switch n {
	case 0:
		return sq.Eq{"resource": resource}
	case 1:
		return sq.Expr("resource = ? OR resource = ?", resource, none)
	case 2:
		return sq.Or{sq.Eq{"resource": resource}, sq.Eq{"resource": none}}
	case 3:
		return sq.Expr("NOT (resource <> ?)", resource)
	case 4:
		return sq.Expr("((resource = ?)) OR (resource = ? AND value = '')", resource, none)
	case 5:
		return sq.And{sq.Expr("true"), sq.Or{sq.Expr("resource = ?", resource), sq.Expr("false")}}
	case 6:
		return sq.Expr("resource IN (?, ?) OR NOT true", resource, none)
	}
	return sq.Expr("resource = ? OR resource IS NULL", resource)
}

// Write implements Store: a claim with fencecolumn.Update changing nothing but
// the fence columns, a value with fencecolumn.Update or fencecolumn.Upsert.
func (s *ColumnStore) Write(ctx context.Context, snap lease.Snapshot, resource, value string) error {
	s.mu.Lock()
	upsert := value != "" && (s.shape == WhereShapes || s.shape < 0 && s.rng.IntN(3) == 0)
	s.mu.Unlock()
	var (
		tag pgconn.CommandTag
		err error
	)
	if upsert {
		row := fencecolumn.UpsertRow{Table: "chaos_rows", Values: map[string]any{"resource": resource, "value": value}, Conflict: []string{"resource"}}
		tag, err = fencecolumn.Upsert(ctx, s.db, snap, row, columns)
	} else {
		// A claim sets the value to itself: only the fence columns change.
		rows := fencecolumn.UpdateRows{Table: "chaos_rows", Set: map[string]any{"value": sq.Expr("value")}, Where: s.where(resource)}
		if value != "" {
			rows.Set = map[string]any{"value": value}
		}
		tag, err = fencecolumn.Update(ctx, s.db, snap, rows, columns)
	}
	if err == nil && tag.RowsAffected() != 1 {
		return fmt.Errorf("chaos: %d rows written for %q, want 1", tag.RowsAffected(), resource)
	}
	return err
}

// Read implements Store.
func (s *ColumnStore) Read(ctx context.Context, resource string) (lease.Token, string, error) {
	var (
		mark  int64
		value string
	)
	err := s.db.QueryRow(ctx, `SELECT coalesce(fence_token, 0), value FROM chaos_rows WHERE resource = $1`, resource).Scan(&mark, &value)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", err
	}
	return lease.Token(mark), value, nil
}
