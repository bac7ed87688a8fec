package fence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"
	"pgregory.net/rapid"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencecolumn"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/lease"
)

// store is a set of resources behind one wrapper, each holding the token of
// its last accepted write and a history of accepted tokens written
// atomically with it.
type store interface {
	// write writes snap's token to every resource, fenced.
	write(ctx context.Context, snap lease.Snapshot, resources []string) error
	// state returns the resource's value (0 if never written) and its
	// history of accepted tokens, in the order they were accepted.
	state(ctx context.Context, resource string) (lease.Token, []lease.Token, error)
	// multi reports whether write takes several resources at once.
	multi() bool
}

// stores returns a fresh store behind each wrapper.
func stores() map[string]func(t *testing.T) store {
	return map[string]func(t *testing.T) store{
		"Memory":       func(*testing.T) store { return &memoryStore{values: map[string][]lease.Token{}} },
		"Tx":           newTxStore,
		"ColumnUpsert": newUpsertStore,
		"Valkey":       func(t *testing.T) store { return newValkeyStore(t, standalone(t)) },
	}
}

type memoryStore struct {
	f      fence.Memory
	mu     sync.Mutex
	values map[string][]lease.Token
}

func (s *memoryStore) multi() bool { return true }
func (s *memoryStore) write(_ context.Context, snap lease.Snapshot, rs []string) error {
	return s.f.Do(snap, rs, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range rs {
			s.values[r] = append(s.values[r], snap.Token)
		}
		return nil
	})
}
func (s *memoryStore) state(_ context.Context, r string) (lease.Token, []lease.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := slices.Clone(s.values[r])
	if len(h) == 0 {
		return 0, nil, nil
	}
	return h[len(h)-1], h, nil
}

// txStore keeps values and history in tables of its own, written in
// fencepostgres.Tx.
type txStore struct{ pool *pgxpool.Pool }

func newTxStore(t *testing.T) store {
	pool := newPool(t)
	_, err := pool.Exec(ctxT(t), `
		CREATE TABLE vals (resource text PRIMARY KEY, token bigint NOT NULL);
		CREATE TABLE history (id bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL);`)
	if err != nil {
		t.Fatal(err)
	}
	return &txStore{pool}
}

func (s *txStore) multi() bool { return true }
func (s *txStore) write(ctx context.Context, snap lease.Snapshot, rs []string) error {
	return fencepostgres.Tx(ctx, s.pool, snap, rs, func(tx pgx.Tx) error {
		for _, r := range rs {
			_, err := tx.Exec(ctx, `
				INSERT INTO vals VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token;
				`, r, int64(snap.Token))
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO history (resource, token) VALUES ($1, $2)`, r, int64(snap.Token)); err != nil {
				return err
			}
		}
		return nil
	})
}
func (s *txStore) state(ctx context.Context, r string) (lease.Token, []lease.Token, error) {
	return pgState(ctx, s.pool, r)
}

func pgState(ctx context.Context, pool *pgxpool.Pool, r string) (lease.Token, []lease.Token, error) {
	var v int64
	if err := pool.QueryRow(ctx, `SELECT token FROM vals WHERE resource = $1`, r).Scan(&v); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, err
	}
	rows, err := pool.Query(ctx, `SELECT token FROM history WHERE resource = $1 ORDER BY id`, r)
	if err != nil {
		return 0, nil, err
	}
	h, err := pgx.CollectRows(rows, pgx.RowTo[lease.Token])
	return lease.Token(v), h, err
}

// upsertStore fences each row by its own columns, with fencecolumn.Upsert.
type upsertStore struct{ pool *pgxpool.Pool }

func newUpsertStore(t *testing.T) store {
	pool := newPool(t)
	_, err := pool.Exec(ctxT(t), `
		CREATE TABLE vals (resource text PRIMARY KEY, token bigint NOT NULL, fence_key text, fence_token bigint);
		CREATE TABLE history (id bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL);`)
	if err != nil {
		t.Fatal(err)
	}
	return &upsertStore{pool}
}

func (s *upsertStore) multi() bool { return false }
func (s *upsertStore) write(ctx context.Context, snap lease.Snapshot, rs []string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := fencecolumn.Upsert(ctx, tx, snap,
			fencecolumn.UpsertRow{Table: "vals", Values: map[string]any{"resource": rs[0], "token": int64(snap.Token)}, Conflict: []string{"resource"}}, col)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO history (resource, token) VALUES ($1, $2)`, rs[0], int64(snap.Token))
		return err
	})
}
func (s *upsertStore) state(ctx context.Context, r string) (lease.Token, []lease.Token, error) {
	return pgState(ctx, s.pool, r)
}

// valkeyStore keeps each resource's value in a string and its history in a
// stream, both written by the fenced script.
type valkeyStore struct {
	c      valkey.Client
	v      *fencevalkey.Fence
	prefix string
}

func newValkeyStore(t *testing.T, c valkey.Client) store {
	return &valkeyStore{c: c, v: newFence(t, c), prefix: fmt.Sprintf("p%d", prefixes.Add(1))}
}

func (s *valkeyStore) multi() bool              { return false }
func (s *valkeyStore) resource(r string) string { return s.prefix + "/" + r }
func (s *valkeyStore) write(ctx context.Context, snap lease.Snapshot, rs []string) error {
	r := s.resource(rs[0])
	_, err := s.v.Do(ctx, snap, r,
		fencevalkey.Set("val:{"+r+"}", snap.Token.String(), fencevalkey.SetOptions{}),
		fencevalkey.XAdd("history:{"+r+"}", fencevalkey.XAddOptions{}, "token", snap.Token.String()))
	return err
}
func (s *valkeyStore) state(ctx context.Context, r string) (lease.Token, []lease.Token, error) {
	r = s.resource(r)
	var v lease.Token
	if text, err := s.c.Do(ctx, s.c.B().Get().Key("val:{"+r+"}").Build()).ToString(); err == nil {
		n, _ := strconv.ParseUint(text, 10, 64)
		v = lease.Token(n)
	}
	entries, err := s.c.Do(ctx, s.c.B().Xrange().Key("history:{"+r+"}").Start("-").End("+").Build()).AsXRange()
	if err != nil {
		return 0, nil, err
	}
	var h []lease.Token
	for _, e := range entries {
		n, _ := strconv.ParseUint(e.FieldValues["token"], 10, 64)
		h = append(h, lease.Token(n))
	}
	return v, h, nil
}

// model is the rule, written out on its own: what the stores must do.
type model map[string]struct {
	key   string
	token lease.Token
}

// apply returns the error a write must get ("" if accepted), and applies it.
func (m model) apply(snap lease.Snapshot, rs []string) (want string, current lease.Token) {
	sorted := slices.Sorted(slices.Values(rs))
	for _, r := range sorted {
		f, ok := m[r]
		switch {
		case !ok:
		case f.key != snap.Key:
			return "foreign", f.token
		case snap.Token < f.token:
			return "stale", f.token
		}
	}
	for _, r := range rs {
		m[r] = struct {
			key   string
			token lease.Token
		}{snap.Key, snap.Token}
	}
	return "", 0
}

var propResources = []string{"alpha", "beta", "gamma", "delta"}

// drawResources draws one resource, or one to three if multi.
func drawResources(rt *rapid.T, multi bool) []string {
	if multi {
		return rapid.SliceOfNDistinct(rapid.SampledFrom(propResources), 1, 3, rapid.ID).Draw(rt, "resources")
	}
	return []string{rapid.SampledFrom(propResources).Draw(rt, "resource")}
}

// TestRuleMatchesModel: every store accepts and refuses exactly the writes
// the model says, with the same current token, in any sequence.
func TestRuleMatchesModel(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			var run atomic.Int64
			rapid.Check(t, func(rt *rapid.T) {
				// Each run writes its own resources of the shared store.
				prefix := fmt.Sprintf("run%d-", run.Add(1))
				m := model{}
				ctx := context.Background()
				n := rapid.IntRange(1, 30).Draw(rt, "writes")
				for i := range n {
					rs := drawResources(rt, s.multi())
					for j := range rs {
						rs[j] = prefix + rs[j]
					}
					key := rapid.SampledFrom([]string{"lease-a", "lease-a", "lease-a", "lease-b"}).Draw(rt, "key")
					token := lease.Token(rapid.Uint64Range(1, 12).Draw(rt, "token"))
					sn := lease.Snapshot{Key: key, Owner: "o", Token: token}
					want, current := m.apply(sn, rs)
					err := s.write(ctx, sn, rs)
					var se *fence.StaleError
					var fe *fence.ForeignLeaseError
					switch {
					case want == "" && err != nil:
						rt.Fatalf("write %d %v to %v: %v; want accepted", i, sn, rs, err)
					case want == "stale" && (!errors.As(err, &se) || se.Current != current):
						rt.Fatalf("write %d %v to %v: %v; want stale, current %d", i, sn, rs, err, current)
					case want == "foreign" && (!errors.As(err, &fe) || fe.Current != current):
						rt.Fatalf("write %d %v to %v: %v; want foreign, current %d", i, sn, rs, err, current)
					}
				}
				for _, r := range propResources {
					v, _, err := s.state(ctx, prefix+r)
					if err != nil {
						rt.Fatal(err)
					}
					if want := m[prefix+r].token; v != want {
						rt.Fatalf("%s holds token %d; model says %d", r, v, want)
					}
				}
			})
		})
	}
}

// TestConcurrentWriters: goroutines write interleaved tokens of one lease to
// several resources at once. Afterwards each resource's history of accepted
// writes never goes down, and its value is the highest token that was
// written to it, which is always accepted.
func TestConcurrentWriters(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			var run atomic.Int64
			rapid.Check(t, func(rt *rapid.T) {
				prefix := fmt.Sprintf("run%d-", run.Add(1))
				type op struct {
					rs    []string
					token lease.Token
				}
				workers := rapid.IntRange(2, 6).Draw(rt, "workers")
				plans := make([][]op, workers)
				highest := map[string]lease.Token{} // by resource
				var top lease.Token                 // of all writes
				for w := range plans {
					for range rapid.IntRange(1, 6).Draw(rt, "writes") {
						rs := drawResources(rt, s.multi())
						tok := lease.Token(rapid.Uint64Range(1, 50).Draw(rt, "token"))
						for i := range rs {
							rs[i] = prefix + rs[i]
							highest[rs[i]] = max(highest[rs[i]], tok)
						}
						top = max(top, tok)
						plans[w] = append(plans[w], op{rs, tok})
					}
				}
				ctx := context.Background()
				var wg sync.WaitGroup
				errs := make(chan error, workers*6)
				for _, plan := range plans {
					wg.Go(func() {
						for _, o := range plan {
							err := s.write(ctx, lease.Snapshot{Key: "lease", Owner: "o", Token: o.token}, o.rs)
							for fence.IsRetryable(err) {
								err = s.write(ctx, lease.Snapshot{Key: "lease", Owner: "o", Token: o.token}, o.rs)
							}
							if err != nil && !errors.Is(err, fence.ErrStale) {
								errs <- err
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					rt.Fatal(err)
				}
				for r, want := range highest {
					v, h, err := s.state(ctx, r)
					if err != nil {
						rt.Fatal(err)
					}
					if !slices.IsSorted(h) {
						rt.Fatalf("%s: accepted tokens went down: %v", r, h)
					}
					if last := lease.Token(0); len(h) > 0 && v != h[len(h)-1] || len(h) == 0 && v != last {
						rt.Fatalf("%s holds %d; want the last accepted token of %v", r, v, h)
					}
					// A write to one resource with the highest token it
					// sees is always accepted. A write to several is
					// refused if any of them is fenced higher, but the
					// highest token of all is accepted everywhere.
					if (!s.multi() || want == top) && v != want {
						rt.Fatalf("%s holds %d (history %v); want the highest token %d", r, v, h, want)
					}
				}
			})
		})
	}
}
