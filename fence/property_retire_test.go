package fence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"
	"pgregory.net/rapid"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/lease"
)

// retiring is a store whose fences retire.
type retiring interface {
	store
	// retire retires the fence of resource now, if it has one.
	retire(ctx context.Context, resource string) error
	// scope names the floors that cover resource: PostgreSQL keeps one
	// floor per lease key for every resource, Valkey one per lease key and
	// hash slot.
	scope(resource string) string
	// sweeper retires every fence that has not advanced for a millisecond.
	sweeper() lease.Sweeper
}

// retiringStores returns a fresh retiring store behind each wrapper that
// retires fences.
func retiringStores() map[string]func(t *testing.T) retiring {
	return map[string]func(t *testing.T) retiring{
		"Tx":            newTxRetiring,
		"Valkey":        func(t *testing.T) retiring { return newValkeyRetiring(t, standalone(t)) },
		"ValkeyCluster": func(t *testing.T) retiring { return newValkeyRetiring(t, cluster(t)) },
	}
}

// sweepWalk walks s to its end.
func sweepWalk(ctx context.Context, s lease.Sweeper) error {
	cursor := ""
	for {
		page, err := s.Sweep(ctx, lease.SweepOptions{Cursor: cursor, Limit: 1000})
		if err != nil || page.Next == "" {
			return err
		}
		cursor = page.Next
	}
}

type txRetiring struct {
	*txStore
	hour, milli *fencepostgres.Table
}

func newTxRetiring(t *testing.T) retiring {
	hour, err := fencepostgres.NewTable(fencepostgres.TableOptions{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	milli, err := fencepostgres.NewTable(fencepostgres.TableOptions{Retention: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return &txRetiring{txStore: newTxStore(t).(*txStore), hour: hour, milli: milli}
}

func (s *txRetiring) retire(ctx context.Context, r string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE public.lease_fences SET updated_at = now() - interval '2 hours' WHERE resource = $1`, r); err != nil {
		return err
	}
	return sweepWalk(ctx, s.hour.Sweeper(s.pool))
}
func (s *txRetiring) scope(string) string    { return "" }
func (s *txRetiring) sweeper() lease.Sweeper { return s.milli.Sweeper(s.pool) }

type valkeyRetiring struct {
	*valkeyStore
	hour, milli *fencevalkey.Fence
}

func newValkeyRetiring(t *testing.T, c valkey.Client) retiring {
	s := newValkeyStore(t, c).(*valkeyStore)
	prefix := strings.TrimSuffix(s.v.FenceKey("x"), "{x}")
	with := func(r time.Duration) *fencevalkey.Fence {
		v, err := fencevalkey.New(c, fencevalkey.Options{Prefix: prefix, Retention: r})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return &valkeyRetiring{valkeyStore: s, hour: with(time.Hour), milli: with(time.Millisecond)}
}

func (s *valkeyRetiring) retire(ctx context.Context, r string) error {
	const age = `if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'at', '1') end return 0`
	fk := s.v.FenceKey(s.resource(r))
	if err := s.c.Do(ctx, s.c.B().Eval().Script(age).Numkeys(1).Key(fk).Build()).Error(); err != nil {
		return err
	}
	return sweepWalk(ctx, s.hour)
}
func (s *valkeyRetiring) scope(r string) string {
	// Resources share a floor key exactly when their fence keys share a
	// hash slot (the floor key carries the slot's tag).
	return s.v.FloorKey(s.resource(r), "scope")
}
func (s *valkeyRetiring) sweeper() lease.Sweeper { return s.milli }

// floorModel is the rule with retirement, written out on its own: the
// fences, and the floors per scope and lease key.
type floorModel struct {
	fences model
	floors map[string]lease.Token
}

func (m *floorModel) apply(snap lease.Snapshot, rs []string, scope func(string) string) (want string, current lease.Token) {
	for _, r := range slices.Sorted(slices.Values(rs)) {
		if f := m.floors[scope(r)+"\x00"+snap.Key]; snap.Token < f {
			return "floor", f
		}
	}
	return m.fences.apply(snap, rs)
}

func (m *floorModel) retire(r string, scope func(string) string) {
	f, ok := m.fences[r]
	if !ok {
		return
	}
	k := scope(r) + "\x00" + f.key
	m.floors[k] = max(m.floors[k], f.token)
	delete(m.fences, r)
}

// TestRetirementMatchesModel: with retirements between the writes, every
// store that retires fences accepts and refuses exactly the writes the
// model of fences and floors says, with the same current token and the
// same reason.
func TestRetirementMatchesModel(t *testing.T) {
	for name, newStore := range retiringStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			var run atomic.Int64
			rapid.Check(t, func(rt *rapid.T) {
				prefix := fmt.Sprintf("run%d-", run.Add(1))
				scope := func(r string) string { return s.scope(r) }
				m := &floorModel{fences: model{}, floors: map[string]lease.Token{}}
				values := map[string]lease.Token{}
				// Lease keys of their own per run: floors are per lease key.
				keyA, keyB := prefix+"lease-a", prefix+"lease-b"
				ctx := context.Background()
				for i := range rapid.IntRange(1, 30).Draw(rt, "steps") {
					if rapid.IntRange(0, 4).Draw(rt, "op") == 0 {
						r := prefix + rapid.SampledFrom(propResources).Draw(rt, "retire")
						m.retire(r, scope)
						if err := s.retire(ctx, r); err != nil {
							rt.Fatalf("step %d: retire %s: %v", i, r, err)
						}
						continue
					}
					rs := drawResources(rt, s.multi())
					for j := range rs {
						rs[j] = prefix + rs[j]
					}
					key := rapid.SampledFrom([]string{keyA, keyA, keyA, keyB}).Draw(rt, "key")
					token := lease.Token(rapid.Uint64Range(1, 12).Draw(rt, "token"))
					sn := lease.Snapshot{Key: key, Owner: "o", Token: token}
					want, current := m.apply(sn, rs, scope)
					err := s.write(ctx, sn, rs)
					var se *fence.StaleError
					var fe *fence.ForeignLeaseError
					switch {
					case want == "" && err != nil:
						rt.Fatalf("step %d: %v to %v: %v; want accepted", i, sn, rs, err)
					case want == "":
						for _, r := range rs {
							values[r] = token
						}
					case want == "floor" && (!errors.As(err, &se) || !se.Floor || se.Current != current):
						rt.Fatalf("step %d: %v to %v: %v; want refused by the floor %d", i, sn, rs, err, current)
					case want == "stale" && (!errors.As(err, &se) || se.Floor || se.Current != current):
						rt.Fatalf("step %d: %v to %v: %v; want stale, current %d", i, sn, rs, err, current)
					case want == "foreign" && (!errors.As(err, &fe) || fe.Current != current):
						rt.Fatalf("step %d: %v to %v: %v; want foreign, current %d", i, sn, rs, err, current)
					}
				}
				for _, r := range propResources {
					v, _, err := s.state(ctx, prefix+r)
					if err != nil {
						rt.Fatal(err)
					}
					if want := values[prefix+r]; v != want {
						rt.Fatalf("%s holds token %d; the accepted writes say %d", r, v, want)
					}
				}
			})
		})
	}
}

// TestRetirementInterleaved: holders of one lease write interleaved tokens
// while a sweeper retires every fence that has not advanced for a
// millisecond, over and over. Afterwards no resource accepted a token
// below one it had accepted before, across its retirements, and the
// holder of the highest token was never refused.
func TestRetirementInterleaved(t *testing.T) {
	for name, newStore := range retiringStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			var run atomic.Int64
			rapid.Check(t, func(rt *rapid.T) {
				prefix := fmt.Sprintf("run%d-", run.Add(1))
				key := prefix + "lease"
				type op struct {
					rs    []string
					token lease.Token
				}
				workers := rapid.IntRange(2, 5).Draw(rt, "workers")
				plans := make([][]op, workers)
				written := map[string]bool{}
				var top lease.Token
				for w := range plans {
					for range rapid.IntRange(1, 8).Draw(rt, "writes") {
						rs := drawResources(rt, s.multi())
						tok := lease.Token(rapid.Uint64Range(1, 50).Draw(rt, "token"))
						for i := range rs {
							rs[i] = prefix + rs[i]
							written[rs[i]] = true
						}
						top = max(top, tok)
						plans[w] = append(plans[w], op{rs, tok})
					}
				}
				ctx := context.Background()
				var (
					wg   sync.WaitGroup
					done = make(chan struct{})
					errs = make(chan error, workers*8+1)
				)
				sweeps := make(chan int, 1)
				go func() {
					n := 0
					defer func() { sweeps <- n }()
					for {
						select {
						case <-done:
							return
						default:
						}
						if err := sweepWalk(ctx, s.sweeper()); err != nil {
							errs <- fmt.Errorf("sweep: %w", err)
							return
						}
						n++
						time.Sleep(time.Millisecond)
					}
				}()
				for _, plan := range plans {
					wg.Go(func() {
						for _, o := range plan {
							sn := lease.Snapshot{Key: key, Owner: "o", Token: o.token}
							err := s.write(ctx, sn, o.rs)
							for fence.IsRetryable(err) {
								err = s.write(ctx, sn, o.rs)
							}
							switch {
							case err != nil && o.token == top:
								errs <- fmt.Errorf("the highest token %d was refused on %v: %w", top, o.rs, err)
							case err != nil && !errors.Is(err, fence.ErrStale):
								errs <- err
							}
						}
					})
				}
				wg.Wait()
				close(done)
				n := <-sweeps
				close(errs)
				for err := range errs {
					rt.Fatal(err)
				}
				for r := range written {
					v, h, err := s.state(ctx, r)
					if err != nil {
						rt.Fatal(err)
					}
					if !slices.IsSorted(h) {
						rt.Fatalf("%s: accepted tokens went down across %d sweeps: %v", r, n, h)
					}
					if len(h) > 0 && v != h[len(h)-1] {
						rt.Fatalf("%s holds %d; want the last accepted token of %v", r, v, h)
					}
				}
			})
		})
	}
}
