package leasequeue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

// pruneKeyPrefix is the lease key of an item of the queue "prune" without
// its ID, as the tests below claim them.
const pruneKeyPrefix = "prune/items/"

// claimer claims the items of one source directly, as a Queue would,
// under the lease keys of the queue "prune".
type claimer struct {
	t   *testing.T
	src leasequeue.Claimer
}

// claim claims item id for a claim of ttl, and returns the claim's
// snapshot.
func (c claimer) claim(ctx context.Context, id string, ttl time.Duration) lease.Snapshot {
	c.t.Helper()
	g, err := c.src.ClaimItem(ctx, leasequeue.ClaimRequest{KeyPrefix: pruneKeyPrefix, Owner: "w", Nonce: "n-" + id, TTL: ttl}, id)
	if err != nil {
		c.t.Fatalf("ClaimItem(%q): %v", id, err)
	}
	return lease.Snapshot{Key: pruneKeyPrefix + id, Owner: "w", Token: g.Token}
}

// complete claims item id and completes it.
func (c claimer) complete(ctx context.Context, id string) lease.Snapshot {
	c.t.Helper()
	s := c.claim(ctx, id, time.Minute)
	if err := c.src.Complete(ctx, s, id); err != nil {
		c.t.Fatalf("Complete(%q): %v", id, err)
	}
	return s
}

// fail claims item id and fails it with f.
func (c claimer) fail(ctx context.Context, id string, f leasequeue.Failure) {
	c.t.Helper()
	if err := c.src.Fail(ctx, c.claim(ctx, id, time.Minute), id, f); err != nil {
		c.t.Fatalf("Fail(%q): %v", id, err)
	}
}

// sweepAll walks sw to the end with o (its Cursor ignored) and returns
// every ID a page listed, sorted.
func sweepAll(ctx context.Context, t *testing.T, sw lease.Sweeper, o lease.SweepOptions) []string {
	t.Helper()
	var out []string
	o.Cursor = ""
	for range 1000 {
		page, err := sw.Sweep(ctx, o)
		if err != nil {
			t.Fatalf("Sweep(%+v): %v", o, err)
		}
		out = append(out, page.Removed...)
		if page.Next == "" {
			slices.Sort(out)
			return out
		}
		o.Cursor = page.Next
	}
	t.Fatalf("Sweep(%+v) did not end in 1000 pages", o)
	return nil
}

// checkStates fails t unless each item of want is in its state, and each
// ID of gone is unknown to src.
func checkStates(ctx context.Context, t *testing.T, src source, want map[string]leasequeue.State, gone ...string) {
	t.Helper()
	for id, state := range want {
		if it, err := src.Item(ctx, id); err != nil || it.State != state {
			t.Errorf("item %q = %+v, %v; want it %s", id, it, err, state)
		}
	}
	for _, id := range gone {
		if it, err := src.Item(ctx, id); !errors.Is(err, leasequeue.ErrNotFound) {
			t.Errorf("item %q = %+v, %v; want it removed", id, it, err)
		}
	}
}

// TestSweepRemovesFinishedItemsPerState: done and dead items go once their
// own retention has passed on the source's clock, and no sooner; pending,
// running and retried items stay, also a running item whose claim
// expired, which its worker can still complete afterwards.
func TestSweepRemovesFinishedItemsPerState(t *testing.T) {
	forEachSource(t, func(t *testing.T, s *store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const doneFor, deadFor = 500 * time.Millisecond, 2500 * time.Millisecond
		src := s.retaining(t, "prune", doneFor, deadFor)
		sw, c := src.(lease.Sweeper), claimer{t, src.(leasequeue.Claimer)}
		mustEnqueue(ctx, t, src, "done", "dead", "pending", "retried", "running", "expired")
		finished := time.Now()
		c.complete(ctx, "done")
		c.fail(ctx, "dead", leasequeue.Failure{Err: errors.New("for good"), Dead: true})
		c.fail(ctx, "retried", leasequeue.Failure{Err: errors.New("again"), RetryAfter: time.Hour})
		c.claim(ctx, "running", time.Minute)
		expired := c.claim(ctx, "expired", time.Millisecond)
		unfinished := map[string]leasequeue.State{"pending": leasequeue.Pending, "retried": leasequeue.Pending,
			"running": leasequeue.Running, "expired": leasequeue.Running}

		if got := sweepAll(ctx, t, sw, lease.SweepOptions{Limit: 100}); len(got) != 0 {
			t.Fatalf("Sweep right after the items finished removed %q", got)
		}
		time.Sleep(time.Until(finished.Add(doneFor + 100*time.Millisecond)))
		if got := sweepAll(ctx, t, sw, lease.SweepOptions{Limit: 100}); !slices.Equal(got, []string{"done"}) {
			t.Fatalf("Sweep after the done retention removed %q; want done only", got)
		}
		if time.Since(finished) > deadFor {
			t.Skip("the machine is too slow to tell the two retentions apart")
		}
		checkStates(ctx, t, src, map[string]leasequeue.State{"dead": leasequeue.Dead}, "done")
		checkStates(ctx, t, src, unfinished)

		// The claim whose lease expired still completes its item.
		if err := src.Complete(ctx, expired, "expired"); err != nil {
			t.Fatalf("Complete of a claim that expired, kept through a sweep: %v", err)
		}
		time.Sleep(time.Until(finished.Add(deadFor + 100*time.Millisecond)))
		if got := sweepAll(ctx, t, sw, lease.SweepOptions{Limit: 100}); !slices.Equal(got, []string{"dead", "expired"}) {
			t.Fatalf("Sweep after the dead retention removed %q; want dead and expired", got)
		}
		delete(unfinished, "expired")
		checkStates(ctx, t, src, unfinished, "dead", "expired")
	})
}

// TestSweepNeverRemovesUnfinishedItems: with the shortest retentions,
// Sweep removes finished items at once, and never a pending, running or
// retried item, nor one whose claim expired.
func TestSweepNeverRemovesUnfinishedItems(t *testing.T) {
	forEachSource(t, func(t *testing.T, s *store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		src := s.retaining(t, "prune", time.Nanosecond, time.Nanosecond)
		sw, c := src.(lease.Sweeper), claimer{t, src.(leasequeue.Claimer)}
		mustEnqueue(ctx, t, src, "done", "dead", "pending", "retried", "running", "expired")
		c.complete(ctx, "done")
		c.fail(ctx, "dead", leasequeue.Failure{Dead: true})
		c.fail(ctx, "retried", leasequeue.Failure{RetryAfter: time.Hour})
		c.claim(ctx, "running", time.Minute)
		c.claim(ctx, "expired", time.Millisecond)
		unfinished := map[string]leasequeue.State{"pending": leasequeue.Pending, "retried": leasequeue.Pending,
			"running": leasequeue.Running, "expired": leasequeue.Running}
		time.Sleep(20 * time.Millisecond)
		for _, limit := range []int{1, 100} {
			for _, dry := range []bool{true, false} {
				got := sweepAll(ctx, t, sw, lease.SweepOptions{Limit: limit, DryRun: dry})
				if want := []string{"dead", "done"}; limit == 1 && !slices.Equal(got, want) {
					t.Fatalf("Sweep(limit %d, dry run %v) listed %q; want %q", limit, dry, got, want)
				}
				if limit == 100 && len(got) != 0 {
					t.Fatalf("Sweep after the finished items were removed listed %q", got)
				}
				checkStates(ctx, t, src, unfinished)
			}
		}
		checkStates(ctx, t, src, unfinished, "done", "dead")
	})
}

// TestSweepDryRun: a dry run lists what a sweep would remove, page by
// page, each item once, and removes nothing.
func TestSweepDryRun(t *testing.T) {
	forEachSource(t, func(t *testing.T, s *store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		src := s.retaining(t, "prune", time.Nanosecond, time.Nanosecond)
		sw, c := src.(lease.Sweeper), claimer{t, src.(leasequeue.Claimer)}
		ids := []string{"a", "b", "c", "d", "e"}
		mustEnqueue(ctx, t, src, ids...)
		for _, id := range ids[:3] {
			c.complete(ctx, id)
		}
		for _, id := range ids[3:] {
			c.fail(ctx, id, leasequeue.Failure{Dead: true})
		}
		time.Sleep(20 * time.Millisecond)
		for _, limit := range []int{1, 2, 100} {
			if got := sweepAll(ctx, t, sw, lease.SweepOptions{Limit: limit, DryRun: true}); !slices.Equal(got, ids) {
				t.Fatalf("dry run with limit %d listed %q; want %q", limit, got, ids)
			}
		}
		checkStates(ctx, t, src, map[string]leasequeue.State{"a": leasequeue.Done, "c": leasequeue.Done, "e": leasequeue.Dead})
		if got := sweepAll(ctx, t, sw, lease.SweepOptions{Limit: 2}); !slices.Equal(got, ids) {
			t.Fatalf("Sweep removed %q; want %q", got, ids)
		}
		checkStates(ctx, t, src, nil, ids...)
		if _, err := sw.Sweep(ctx, lease.SweepOptions{Cursor: "garbage", Limit: 1}); err == nil {
			t.Error("Sweep with a cursor of no source succeeded")
		}
	})
}

// TestSweepKeepForever: lease.KeepForever keeps the items of its state,
// and a source that keeps both has nothing to sweep.
func TestSweepKeepForever(t *testing.T) {
	forEachSource(t, func(t *testing.T, s *store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, tc := range []struct {
			done, dead time.Duration
			removed    []string
		}{
			{lease.KeepForever, time.Nanosecond, []string{"dead"}},
			{time.Nanosecond, lease.KeepForever, []string{"done"}},
			{lease.KeepForever, lease.KeepForever, nil},
		} {
			queue := fmt.Sprintf("keep-%v-%v", tc.done, tc.dead)
			src := s.retaining(t, queue, tc.done, tc.dead)
			sw, c := src.(lease.Sweeper), claimer{t, src.(leasequeue.Claimer)}
			mustEnqueue(ctx, t, src, "done", "dead")
			c.complete(ctx, "done")
			c.fail(ctx, "dead", leasequeue.Failure{Dead: true})
			time.Sleep(20 * time.Millisecond)
			if got := sweepAll(ctx, t, sw, lease.SweepOptions{Limit: 1}); !slices.Equal(got, tc.removed) {
				t.Errorf("retentions done %v, dead %v: Sweep removed %q; want %q", tc.done, tc.dead, got, tc.removed)
			}
			if tc.removed == nil {
				if page, err := sw.Sweep(ctx, lease.SweepOptions{Limit: 1}); err != nil || page.Next != "" || len(page.Removed) != 0 {
					t.Errorf("Sweep of a source that keeps everything = %+v, %v; want an empty last page", page, err)
				}
			}
		}
	})
}

// TestPrunedItemEnqueuedAgain: an ID whose item was removed is a new item
// when enqueued again (until then, Enqueue leaves the finished item
// alone), and its first claim's token is above every token of the
// removed item, so the removed item's claims cannot write it.
func TestPrunedItemEnqueuedAgain(t *testing.T) {
	forEachSource(t, func(t *testing.T, s *store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		src := s.retaining(t, "prune", time.Nanosecond, time.Nanosecond)
		sw, c := src.(lease.Sweeper), claimer{t, src.(leasequeue.Claimer)}
		mustEnqueue(ctx, t, src, "x")
		// Two claims, the first taken over: the item's tokens rise.
		first := c.claim(ctx, "x", time.Millisecond)
		time.Sleep(5 * time.Millisecond)
		last := c.complete(ctx, "x")
		if last.Token <= first.Token {
			t.Fatalf("tokens %d then %d", first.Token, last.Token)
		}
		if n, err := src.Enqueue(ctx, "x"); err != nil || n != 0 {
			t.Fatalf("Enqueue of a done item = %d, %v; want it left alone", n, err)
		}
		time.Sleep(5 * time.Millisecond)
		if got := sweepAll(ctx, t, sw, lease.SweepOptions{Limit: 10}); !slices.Equal(got, []string{"x"}) {
			t.Fatalf("Sweep removed %q; want x", got)
		}
		if n, err := src.Enqueue(ctx, "x"); err != nil || n != 1 {
			t.Fatalf("Enqueue of a removed item = %d, %v; want it added", n, err)
		}
		if it := mustItem(ctx, t, src, "x"); it.State != leasequeue.Pending || it.Attempts != 0 || it.Token != 0 {
			t.Fatalf("item enqueued again = %+v; want a new pending item", it)
		}
		again := c.claim(ctx, "x", time.Minute)
		if again.Token <= last.Token {
			t.Fatalf("the claim of an ID enqueued again got token %d, not above the removed item's %d", again.Token, last.Token)
		}
		for _, old := range []lease.Snapshot{first, last} {
			if err := src.Complete(ctx, old, "x"); !errors.Is(err, fence.ErrStale) {
				t.Errorf("Complete under the removed item's token %d = %v; want fence.ErrStale", old.Token, err)
			}
		}
		if err := src.Complete(ctx, again, "x"); err != nil {
			t.Fatalf("Complete of the new item: %v", err)
		}
	})
}

// sweepWatch watches the Sweep calls of the sources of several queues
// that share one source.
type sweepWatch struct {
	inFlight, most atomic.Int32
	walks          atomic.Int32
	mu             sync.Mutex
	problems       []string
}

func (w *sweepWatch) problem(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

// watchedSource is the source of one worker: a Claimer whose Sweep checks
// that the worker holds the prune lease and that no other Sweep runs, and
// makes every page one item long.
type watchedSource struct {
	leasequeue.Claimer
	sw       lease.Sweeper
	inspect  lease.Backend
	owner    string
	pruneKey string
	w        *sweepWatch
}

func (s *watchedSource) Sweep(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
	n := s.w.inFlight.Add(1)
	defer s.w.inFlight.Add(-1)
	for m := s.w.most.Load(); n > m && !s.w.most.CompareAndSwap(m, n); m = s.w.most.Load() {
	}
	if o.Cursor == "" {
		s.w.walks.Add(1)
	}
	if rec, err := s.inspect.Inspect(ctx, s.pruneKey); ctx.Err() == nil && (err != nil || !rec.Held || rec.Owner != s.owner) {
		s.w.problem("%s sweeps while the prune lease is %+v, %v", s.owner, rec, err)
	}
	time.Sleep(5 * time.Millisecond) // long enough to meet another worker's walk
	o.Limit = 1
	return s.sw.Sweep(ctx, o)
}

// TestRunPrunes: Run prunes the source in the background by itself, one
// worker at a time, under the prune lease, and reports each prune; a
// worker that finds the lease held skips its turn.
func TestRunPrunes(t *testing.T) {
	forEachSource(t, func(t *testing.T, s *store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		src := s.retaining(t, "pruned", time.Nanosecond, time.Nanosecond)
		ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		mustEnqueue(ctx, t, src, ids...)
		var (
			watch   sweepWatch
			evs     events
			wg      sync.WaitGroup
			inspect = s.backend(t)
			refused atomic.Int32 // TryAcquires of the prune lease refused
		)
		refusals := lease.ObserverFunc(func(e lease.Event) {
			if f, ok := e.(*lease.AcquireFailed); ok && f.Key == "pruned/prune/" && errors.Is(f.Err, lease.ErrNotAcquired) {
				refused.Add(1)
			}
		})
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		for _, owner := range []string{"w1", "w2"} {
			ws := &watchedSource{Claimer: src.(leasequeue.Claimer), sw: src.(lease.Sweeper), inspect: inspect, owner: owner, w: &watch}
			client, err := lease.NewClient(s.backend(t), lease.ClientOptions{Owner: owner, Observer: refusals})
			if err != nil {
				t.Fatal(err)
			}
			q, err := leasequeue.New(client, ws, leasequeue.Options{Name: "pruned", Policy: loadedPolicy(t, 5*time.Second),
				Concurrency: 2, PruneEvery: 30 * time.Millisecond, Observer: &evs})
			if err != nil {
				t.Fatal(err)
			}
			ws.pruneKey = q.PruneKey()
			wg.Go(func() {
				if err := q.Run(runCtx, func(context.Context, *leasequeue.Claim) error { return nil }); err != nil {
					t.Error(err)
				}
			})
		}
		eventually(t, 30*time.Second, "every item done and removed", func() bool {
			for _, id := range ids {
				if _, err := src.Item(ctx, id); !errors.Is(err, leasequeue.ErrNotFound) {
					return false
				}
			}
			return true
		})
		// More turns, until a worker found the other one pruning.
		walks := watch.walks.Load()
		eventually(t, 30*time.Second, "more prunes, one of them refused", func() bool {
			return watch.walks.Load() >= walks+4 && refused.Load() > 0
		})
		stop()
		wg.Wait()

		if m := watch.most.Load(); m != 1 {
			t.Errorf("%d Sweep calls ran at once; want 1", m)
		}
		for _, p := range watch.problems {
			t.Error(p)
		}
		removed, workers := 0, map[string]bool{}
		for _, e := range all[*leasequeue.Pruned](&evs) {
			if e.Err != nil || e.Key != "pruned/prune/" || e.Token == 0 {
				t.Errorf("Pruned event %+v", e)
			}
			removed += e.Removed
			workers[e.Worker] = true
		}
		if removed != len(ids) {
			t.Errorf("Pruned events count %d removed items; want %d", removed, len(ids))
		}
		t.Logf("%d walks, by %d workers; %d turns skipped", watch.walks.Load(), len(workers), refused.Load())
	})
}

// TestRunPrunesNotWhenOff: a negative PruneEvery never prunes.
func TestRunPrunesNotWhenOff(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := memoryStore(nil)
	src := s.retaining(t, "off", time.Nanosecond, time.Nanosecond)
	mustEnqueue(ctx, t, src, "a")
	var watch sweepWatch
	ws := &watchedSource{Claimer: src.(leasequeue.Claimer), sw: src.(lease.Sweeper), inspect: s.backend(t), owner: "w", w: &watch}
	var evs events
	q := newQueue(t, s, ws, "w", leasequeue.Options{Name: "off", Policy: loadedPolicy(t, time.Second), PruneEvery: -1, Observer: &evs})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- q.Run(runCtx, func(context.Context, *leasequeue.Claim) error { return nil }) }()
	eventually(t, 10*time.Second, "a done", func() bool { return mustItem(ctx, t, src, "a").State == leasequeue.Done })
	time.Sleep(100 * time.Millisecond)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := watch.walks.Load(); n != 0 || len(all[*leasequeue.Pruned](&evs)) != 0 {
		t.Errorf("%d walks with PruneEvery -1", n)
	}
	// Prune still prunes on demand.
	if n, err := q.Prune(ctx); err != nil || n != 1 {
		t.Errorf("Prune = %d, %v; want 1 item removed", n, err)
	}
}
