package leasequeue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

// TestSourceContract holds every ready-made source to the rules of
// leasequeue.Source, on each server it supports.
func TestSourceContract(t *testing.T) {
	kinds := []struct {
		name string
		make func(testing.TB) *store
	}{
		{"memory", func(testing.TB) *store { return memoryStore(nil) }},
		{"valkey", valkeyStore},
		{"valkey-cluster", valkeyClusterStore},
		{"postgres", postgresStore},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := k.make(t)
			for _, c := range sourceCases {
				t.Run(c.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					c.run(ctx, t, s.source(t, "contract-"+c.name))
				})
			}
		})
	}
}

// snap returns a snapshot of the lease on item id of queue "q" with token.
func snap(id string, token lease.Token) lease.Snapshot {
	return lease.Snapshot{Key: "q/items/" + id, Owner: fmt.Sprintf("worker-%d", token), Token: token}
}

func mustEnqueue(ctx context.Context, t *testing.T, src source, ids ...string) {
	t.Helper()
	if _, err := src.Enqueue(ctx, ids...); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
}

func mustNext(ctx context.Context, t *testing.T, src source, n int, hide time.Duration) []string {
	t.Helper()
	ids, err := src.Next(ctx, n, hide)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	slices.Sort(ids)
	return ids
}

func mustItem(ctx context.Context, t *testing.T, src source, id string) leasequeue.Item {
	t.Helper()
	it, err := src.Item(ctx, id)
	if err != nil {
		t.Fatalf("Item(%q): %v", id, err)
	}
	return it
}

func mustBegin(ctx context.Context, t *testing.T, src source, s lease.Snapshot, id string, want int) {
	t.Helper()
	b, err := src.Begin(ctx, s, id, time.Hour)
	if err != nil || b.Attempt != want {
		t.Fatalf("Begin(%q, token %d) = %+v, %v; want attempt %d", id, s.Token, b, err, want)
	}
}

// ageSlack is how far a source's clock may be ahead of the test's in the
// upper bounds of claim ages: the servers of the tests run on the test's
// machine, but LEASE_VALKEY_ADDR and LEASE_POSTGRES_URL may name others.
const ageSlack = time.Second

// checkAge fails unless age is at least least and at most most (plus
// ageSlack), allowing the millisecond a source may round down.
func checkAge(t *testing.T, what string, age, least, most time.Duration) {
	t.Helper()
	if age < least-time.Millisecond || age > most+ageSlack {
		t.Errorf("%s: Age = %v; want between %v and %v (+%v)", what, age, least, most, ageSlack)
	}
}

var sourceCases = []struct {
	name string
	run  func(ctx context.Context, t *testing.T, src source)
}{
	{"next-hides-what-it-hands-out", func(ctx context.Context, t *testing.T, src source) {
		if got := mustNext(ctx, t, src, 10, time.Hour); len(got) != 0 {
			t.Fatalf("Next on an empty queue = %q", got)
		}
		mustEnqueue(ctx, t, src, "a", "b", "c")
		if n, err := src.Enqueue(ctx, "a"); err != nil || n != 0 {
			t.Fatalf("Enqueue of a known ID = %d, %v; want 0 new", n, err)
		}
		if got := mustNext(ctx, t, src, 2, time.Hour); len(got) != 2 {
			t.Fatalf("Next(2) = %q", got)
		}
		if got := mustNext(ctx, t, src, 10, time.Hour); len(got) != 1 {
			t.Fatalf("Next after Next(2) = %q; want the third item only", got)
		}
		if got := mustNext(ctx, t, src, 10, time.Hour); len(got) != 0 {
			t.Fatalf("Next while all are hidden = %q", got)
		}
		if err := src.Defer(ctx, "b", 0); err != nil {
			t.Fatal(err)
		}
		if got := mustNext(ctx, t, src, 10, time.Hour); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("Next after Defer(b, 0) = %q; want [b]", got)
		}
	}},
	{"concurrent-next-hands-out-disjoint-items", func(ctx context.Context, t *testing.T, src source) {
		var ids []string
		for i := range 300 {
			ids = append(ids, fmt.Sprint("item-", i))
		}
		mustEnqueue(ctx, t, src, ids...)
		var (
			mu   sync.Mutex
			seen = map[string]int{}
			wg   sync.WaitGroup
		)
		for range 6 {
			wg.Go(func() {
				for {
					got, err := src.Next(ctx, 7, time.Hour)
					if err != nil {
						t.Error(err)
						return
					}
					if len(got) == 0 {
						return
					}
					mu.Lock()
					for _, id := range got {
						seen[id]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for _, id := range ids {
			if seen[id] != 1 {
				t.Errorf("item %s handed out %d times, want once", id, seen[id])
			}
		}
	}},
	{"begin-counts-attempts-and-moves-the-fence", func(ctx context.Context, t *testing.T, src source) {
		mustEnqueue(ctx, t, src, "a")
		if it := mustItem(ctx, t, src, "a"); it.State != leasequeue.Pending || it.Attempts != 0 {
			t.Fatalf("new item: %+v", it)
		}
		mustBegin(ctx, t, src, snap("a", 10), "a", 1)
		mustBegin(ctx, t, src, snap("a", 12), "a", 2)
		_, err := src.Begin(ctx, snap("a", 11), "a", time.Hour)
		var stale *fence.StaleError
		if !errors.As(err, &stale) || stale.Current != 12 || stale.Token != 11 {
			t.Fatalf("Begin with an older token = %v; want a *fence.StaleError (11 < 12)", err)
		}
		it := mustItem(ctx, t, src, "a")
		want := leasequeue.Item{ID: "a", State: leasequeue.Running, Attempts: 2, FenceKey: "q/items/a", Token: 12, Owner: "worker-12"}
		if it != want {
			t.Fatalf("after a refused Begin: %+v; want %+v", it, want)
		}
		if got := mustNext(ctx, t, src, 10, time.Hour); len(got) != 0 {
			t.Fatalf("Next right after Begin(hide 1h) = %q", got)
		}
	}},
	{"begin-reports-the-age", func(ctx context.Context, t *testing.T, src source) {
		// The first attempt's age runs from Enqueue; the retry's from the
		// end of its delay, not from Enqueue. Each bound is causal: the
		// source measured between the calls around it.
		const wait, delay, retryWait = 1500 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond
		before := time.Now()
		mustEnqueue(ctx, t, src, "a")
		time.Sleep(wait)
		b, err := src.Begin(ctx, snap("a", 1), "a", time.Hour)
		if err != nil || b.Attempt != 1 {
			t.Fatalf("Begin = %+v, %v; want attempt 1", b, err)
		}
		checkAge(t, "first attempt", b.Age, wait, time.Since(before))
		failing := time.Now()
		if err := src.Fail(ctx, snap("a", 1), "a", leasequeue.Failure{Err: errors.New("again"), RetryAfter: delay}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(retryWait)
		b, err = src.Begin(ctx, snap("a", 2), "a", time.Hour)
		if err != nil || b.Attempt != 2 {
			t.Fatalf("second Begin = %+v, %v; want attempt 2", b, err)
		}
		checkAge(t, "retry", b.Age, retryWait-delay, time.Since(failing)-delay)
	}},
	{"complete-is-fenced", func(ctx context.Context, t *testing.T, src source) {
		mustEnqueue(ctx, t, src, "a")
		mustBegin(ctx, t, src, snap("a", 10), "a", 1)
		mustBegin(ctx, t, src, snap("a", 12), "a", 2) // taken over
		if err := src.Complete(ctx, snap("a", 10), "a"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Complete by the old claim = %v; want fence.ErrStale", err)
		}
		if err := src.Fail(ctx, snap("a", 10), "a", leasequeue.Failure{Err: errors.New("x"), Dead: true}); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Fail by the old claim = %v; want fence.ErrStale", err)
		}
		if it := mustItem(ctx, t, src, "a"); it.State != leasequeue.Running || it.Token != 12 || it.Owner != "worker-12" {
			t.Fatalf("after refused writes: %+v; want the new claim's running item", it)
		}
		if err := src.Complete(ctx, snap("a", 12), "a"); err != nil {
			t.Fatalf("Complete by the new claim = %v", err)
		}
		if it := mustItem(ctx, t, src, "a"); it.State != leasequeue.Done || it.Token != 12 {
			t.Fatalf("after Complete: %+v", it)
		}
		if err := src.Complete(ctx, snap("a", 12), "a"); !errors.Is(err, leasequeue.ErrFinished) {
			t.Fatalf("second Complete = %v; want ErrFinished", err)
		}
		if _, err := src.Begin(ctx, snap("a", 13), "a", time.Hour); !errors.Is(err, leasequeue.ErrFinished) {
			t.Fatalf("Begin on a done item = %v; want ErrFinished", err)
		}
		_ = src.Defer(ctx, "a", 0)
		for _, id := range mustNext(ctx, t, src, 10, time.Hour) {
			// Allowed (see Source.Next), if Begin then says so.
			if _, err := src.Begin(ctx, snap("a", 14), id, time.Hour); !errors.Is(err, leasequeue.ErrFinished) {
				t.Fatalf("Next handed out the done item %q, and Begin = %v; want ErrFinished", id, err)
			}
		}
		if got := mustNext(ctx, t, src, 10, time.Hour); len(got) != 0 {
			t.Fatalf("Next hands out a done item again: %q", got)
		}
	}},
	{"fail-retries-then-buries", func(ctx context.Context, t *testing.T, src source) {
		mustEnqueue(ctx, t, src, "a")
		mustBegin(ctx, t, src, snap("a", 5), "a", 1)
		if err := src.Fail(ctx, snap("a", 5), "a", leasequeue.Failure{Err: errors.New("boom"), RetryAfter: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if it := mustItem(ctx, t, src, "a"); it.State != leasequeue.Pending || it.LastError != "boom" || it.Attempts != 1 {
			t.Fatalf("after Fail: %+v", it)
		}
		if got := mustNext(ctx, t, src, 10, time.Hour); len(got) != 0 {
			t.Fatalf("Next within RetryAfter = %q", got)
		}
		if err := src.Complete(ctx, snap("a", 5), "a"); err == nil || errors.Is(err, leasequeue.ErrFinished) {
			t.Fatalf("Complete of a pending item = %v; want a not-running error", err)
		}
		_ = src.Defer(ctx, "a", 0)
		if got := mustNext(ctx, t, src, 10, time.Hour); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("Next once the retry is due = %q", got)
		}
		mustBegin(ctx, t, src, snap("a", 6), "a", 2)
		if err := src.Fail(ctx, snap("a", 6), "a", leasequeue.Failure{Err: errors.New("again"), Dead: true}); err != nil {
			t.Fatal(err)
		}
		if it := mustItem(ctx, t, src, "a"); it.State != leasequeue.Dead || it.LastError != "again" {
			t.Fatalf("after a dead Fail: %+v", it)
		}
		if _, err := src.Begin(ctx, snap("a", 7), "a", time.Hour); !errors.Is(err, leasequeue.ErrFinished) {
			t.Fatalf("Begin on a dead item = %v; want ErrFinished", err)
		}
	}},
	{"unknown-items", func(ctx context.Context, t *testing.T, src source) {
		if _, err := src.Begin(ctx, snap("nope", 1), "nope", time.Hour); !errors.Is(err, leasequeue.ErrNotFound) {
			t.Fatalf("Begin of an unknown item = %v; want ErrNotFound", err)
		}
		if err := src.Complete(ctx, snap("nope", 1), "nope"); !errors.Is(err, leasequeue.ErrNotFound) {
			t.Fatalf("Complete of an unknown item = %v; want ErrNotFound", err)
		}
		if err := src.Defer(ctx, "nope", 0); err != nil {
			t.Fatalf("Defer of an unknown item = %v; want nil", err)
		}
		if _, err := src.Item(ctx, "nope"); !errors.Is(err, leasequeue.ErrNotFound) {
			t.Fatalf("Item of an unknown item = %v; want ErrNotFound", err)
		}
	}},
	{"foreign-lease", func(ctx context.Context, t *testing.T, src source) {
		mustEnqueue(ctx, t, src, "a")
		mustBegin(ctx, t, src, snap("a", 10), "a", 1)
		other := lease.Snapshot{Key: "other/items/a", Owner: "x", Token: 99}
		if _, err := src.Begin(ctx, other, "a", time.Hour); !errors.Is(err, fence.ErrForeignLease) {
			t.Fatalf("Begin under another lease key = %v; want fence.ErrForeignLease", err)
		}
	}},
}
