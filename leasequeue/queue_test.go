package leasequeue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasetest"
)

// events collects the events of one or more queues or groups.
type events struct {
	mu   sync.Mutex
	list []leasequeue.Event
}

func (e *events) Observe(ev leasequeue.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

// all returns the events of type T.
func all[T leasequeue.Event](e *events) []T {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []T
	for _, ev := range e.list {
		if x, ok := ev.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// fakeQueue returns a queue on a memory backend and source, all on clock,
// for a worker named owner.
func fakeQueue(t *testing.T, b lease.Backend, src leasequeue.Source, owner string, clock lease.Clock, o leasequeue.Options) *leasequeue.Queue {
	t.Helper()
	q, err := leasequeue.New(newClient(t, b, owner, clock), src, o)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestNewValidatesOptions(t *testing.T) {
	b := leasememory.New(leasememory.Options{})
	c := newClient(t, b, "w", nil)
	src := leasequeue.NewMemorySource(leasequeue.MemoryOptions{})
	p := newPolicy(t, lease.PolicyOptions{TTL: time.Second})
	for _, tc := range []struct {
		name string
		o    leasequeue.Options
	}{
		{"no name", leasequeue.Options{Policy: p}},
		{"zero policy", leasequeue.Options{Name: "q"}},
		{"bad name", leasequeue.Options{Name: "q\n", Policy: p}},
		{"negative concurrency", leasequeue.Options{Name: "q", Policy: p, Concurrency: -1}},
		{"negative attempts", leasequeue.Options{Name: "q", Policy: p, MaxAttempts: -1}},
		{"negative poll", leasequeue.Options{Name: "q", Policy: p, PollEvery: -time.Second}},
	} {
		if _, err := leasequeue.New(c, src, tc.o); err == nil {
			t.Errorf("%s: New succeeded", tc.name)
		}
	}
	if _, err := leasequeue.New(nil, src, leasequeue.Options{Name: "q", Policy: p}); err == nil {
		t.Error("New with a nil client succeeded")
	}
	if _, err := leasequeue.New(c, nil, leasequeue.Options{Name: "q", Policy: p}); err == nil {
		t.Error("New with a nil source succeeded")
	}
}

// TestClaimOnTheFakeClock walks one item through two workers: a held
// item can't be claimed, a completed one is finished, and a released one
// is claimable at once.
func TestClaimOnTheFakeClock(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	b := leasememory.New(leasememory.Options{Clock: clock})
	src := leasequeue.NewMemorySource(leasequeue.MemoryOptions{Clock: clock})
	src.Enqueue("a", "b")
	p := newPolicy(t, lease.PolicyOptions{TTL: 10 * time.Second})
	var ev events
	o := leasequeue.Options{Name: "q", Policy: p, Observer: &ev}
	qa := fakeQueue(t, b, src, "worker-a", clock, o)
	qb := fakeQueue(t, b, src, "worker-b", clock, o)
	ctx := context.Background()

	ca, err := qa.Claim(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if ca.ID() != "a" || ca.Key() != "q/items/a" || ca.Attempt() != 1 || ca.Snapshot().Owner != "worker-a" {
		t.Fatalf("claim: %s %s attempt %d %+v", ca.ID(), ca.Key(), ca.Attempt(), ca.Snapshot())
	}
	if _, err := qb.Claim(ctx, "a"); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("second claim of a held item = %v; want lease.ErrNotAcquired", err)
	}
	if err := ca.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ca.Complete(ctx); !errors.Is(err, leasequeue.ErrClosed) {
		t.Fatalf("second Complete = %v; want ErrClosed", err)
	}
	if cause := context.Cause(ca.Context()); !errors.Is(cause, leasequeue.ErrClosed) {
		t.Errorf("the claim's context's cause after Complete = %v; want ErrClosed", cause)
	}
	if it, _ := src.Item("a"); it.State != leasequeue.Done || it.Owner != "worker-a" {
		t.Fatalf("after Complete: %+v", it)
	}
	if _, err := qb.Claim(ctx, "a"); !errors.Is(err, leasequeue.ErrFinished) {
		t.Fatalf("claim of a done item = %v; want ErrFinished", err)
	}
	if _, err := qb.Claim(ctx, "zzz"); !errors.Is(err, leasequeue.ErrNotFound) {
		t.Fatalf("claim of an unknown item = %v; want ErrNotFound", err)
	}

	cb, err := qa.Claim(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := cb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cb2, err := qb.Claim(ctx, "b")
	if err != nil {
		t.Fatalf("claim right after Release = %v", err)
	}
	if cb2.Attempt() != 2 {
		t.Errorf("attempt after a release = %d, want 2 (attempts count when they begin)", cb2.Attempt())
	}
	if err := cb2.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(all[*leasequeue.Claimed](&ev)); n != 3 {
		t.Errorf("%d Claimed events, want 3", n)
	}
	if n := len(all[*leasequeue.Completed](&ev)); n != 2 { // a call on a closed claim is no event
		t.Errorf("%d Completed events, want 2", n)
	}
}

// TestClaimedCarriesTheAge: the Claimed event reports how long the item
// had been ready on the source's clock: since Enqueue, then since the end
// of its retry delay.
func TestClaimedCarriesTheAge(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	b := leasememory.New(leasememory.Options{Clock: clock})
	src := leasequeue.NewMemorySource(leasequeue.MemoryOptions{Clock: clock})
	src.Enqueue("a")
	var ev events
	q := fakeQueue(t, b, src, "w", clock, leasequeue.Options{
		Name: "q", Policy: newPolicy(t, lease.PolicyOptions{TTL: 10 * time.Second}), Observer: &ev,
		RetryDelay: func(int) time.Duration { return time.Minute },
	})
	ctx := context.Background()
	clock.Advance(7 * time.Second)
	c, err := q.Claim(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fail(ctx, errors.New("again")); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute + 3*time.Second)
	if c, err = q.Claim(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	_ = c.Complete(ctx)
	claims := all[*leasequeue.Claimed](&ev)
	if len(claims) != 2 || claims[0].Age != 7*time.Second || claims[1].Age != 3*time.Second {
		for _, e := range claims {
			t.Logf("Claimed attempt %d, age %v", e.Attempt, e.Age)
		}
		t.Fatalf("%d Claimed events; want ages 7s and 3s", len(claims))
	}
}

// TestFailRetriesThenBuries: failures come back after RetryDelay until the
// last attempt, which buries the item.
func TestFailRetriesThenBuries(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	b := leasememory.New(leasememory.Options{Clock: clock})
	src := leasequeue.NewMemorySource(leasequeue.MemoryOptions{Clock: clock})
	src.Enqueue("a")
	var ev events
	q := fakeQueue(t, b, src, "w", clock, leasequeue.Options{
		Name: "q", Policy: newPolicy(t, lease.PolicyOptions{TTL: 10 * time.Second}), MaxAttempts: 3, Observer: &ev,
		RetryDelay: func(attempt int) time.Duration { return time.Duration(attempt) * time.Minute },
	})
	ctx := context.Background()
	for attempt := 1; attempt <= 3; attempt++ {
		c, err := q.Claim(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Fail(ctx, fmt.Errorf("failure %d", attempt)); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Duration(attempt) * time.Minute)
	}
	it, _ := src.Item("a")
	if it.State != leasequeue.Dead || it.Attempts != 3 || it.LastError != "failure 3" {
		t.Fatalf("after 3 failures: %+v", it)
	}
	failed := all[*leasequeue.Failed](&ev)
	if len(failed) != 3 || failed[0].Dead || failed[0].RetryAfter != time.Minute || !failed[2].Dead {
		t.Fatalf("Failed events: %+v", failed)
	}
}

// TestWorkersThatDieUseUpAttempts: a claim whose worker dies counts as an
// attempt, so an item that kills its workers is buried.
func TestWorkersThatDieUseUpAttempts(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	b := leasememory.New(leasememory.Options{Clock: clock})
	src := leasequeue.NewMemorySource(leasequeue.MemoryOptions{Clock: clock})
	src.Enqueue("poison")
	p := newPolicy(t, lease.PolicyOptions{TTL: 10 * time.Second})
	ctx := context.Background()
	for i := range 2 {
		// Each worker claims the item and dies: its clock stops, so it
		// never renews, and the lease expires on the backend's clock.
		q := fakeQueue(t, b, src, fmt.Sprint("doomed-", i), leasetest.NewFakeClock(clock.Now()), leasequeue.Options{Name: "q", Policy: p, MaxAttempts: 2})
		c, err := q.Claim(ctx, "poison")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release(ctx) // stops its renewer: the lease is long gone
		clock.Advance(p.TTL())
	}
	q := fakeQueue(t, b, src, "survivor", clock, leasequeue.Options{Name: "q", Policy: p, MaxAttempts: 2})
	_, err := q.Claim(ctx, "poison")
	if !errors.Is(err, leasequeue.ErrFinished) || !errors.Is(err, leasequeue.ErrTooManyAttempts) {
		t.Fatalf("third claim = %v; want ErrFinished and ErrTooManyAttempts", err)
	}
	if it, _ := src.Item("poison"); it.State != leasequeue.Dead || it.Attempts != 3 {
		t.Fatalf("item: %+v; want dead after 3 begun attempts", it)
	}
}

// cutOff is a backend that fails every operation, without sending it,
// while cut is set: a worker on the wrong side of a network partition.
type cutOff struct {
	lease.Backend
	cut atomic.Bool
}

var errCut = errors.New("connect: connection refused")

func (b *cutOff) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	if b.cut.Load() {
		return 0, errCut
	}
	return b.Backend.Acquire(ctx, r)
}

func (b *cutOff) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	if b.cut.Load() {
		return errCut
	}
	return b.Backend.Renew(ctx, a, ttl)
}

func (b *cutOff) Release(ctx context.Context, a lease.Acquisition) error {
	if b.cut.Load() {
		return errCut
	}
	return b.Backend.Release(ctx, a)
}

func (b *cutOff) Inspect(ctx context.Context, key string) (lease.Record, error) {
	if b.cut.Load() {
		return lease.Record{}, errCut
	}
	return b.Backend.Inspect(ctx, key)
}

// TestSickWorkerTakesNoNewWork: while a renewal of one of its claims is
// overdue, a queue claims nothing; once renewals go through, it claims
// again.
func TestSickWorkerTakesNoNewWork(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	mem := leasequeue.NewMemorySource(leasequeue.MemoryOptions{Clock: clock})
	mem.Enqueue("a", "b")
	// The claims live in the source: its renewals fail while fail is set.
	var fail atomic.Bool
	src := leasequeue.CutSource(mem, &fail, errCut)
	b := leasememory.New(leasememory.Options{Clock: clock})
	// TTL 3s: renew every 1s, local lifetime 2.5s, timeout 300ms, retry
	// 100ms; a deadline nearer than 1.1s is overdue.
	p := newPolicy(t, lease.PolicyOptions{TTL: 3 * time.Second})
	q := fakeQueue(t, b, src, "w", clock, leasequeue.Options{Name: "q", Policy: p})
	ctx := context.Background()
	c, err := q.Claim(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(ctx)
	// step advances the clock, then lets the renewer reach its next sleep.
	step := func(d time.Duration) {
		clock.Advance(d)
		if err := clock.WaitForTimers(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	step(0)
	fail.Store(true)
	for range 15 { // 1.5s: the renewal due after 1s has failed
		step(100 * time.Millisecond)
	}
	if !q.Overdue() {
		t.Fatal("not overdue 1.5s into failing renewals")
	}
	if _, err := q.Claim(ctx, "b"); !errors.Is(err, leasequeue.ErrUnhealthy) {
		t.Fatalf("Claim while renewals fail = %v; want ErrUnhealthy", err)
	}
	fail.Store(false)
	for range 2 { // the next retry, 100ms later at most, goes through
		step(50 * time.Millisecond)
	}
	if q.Overdue() {
		t.Fatalf("still overdue after a retry that went through (deadline in %v)", c.Snapshot().Deadline.Sub(clock.Now()))
	}
	cb, err := q.Claim(ctx, "b")
	if err != nil {
		t.Fatalf("Claim after recovery = %v", err)
	}
	_ = cb.Complete(ctx)
	if c.Err() != nil {
		t.Fatalf("the claim was lost: %v", c.Err())
	}
}

// TestRunProcessesEveryItem runs three workers on the memory backend:
// items that succeed are done, items that always fail are dead after
// MaxAttempts, and Run returns when its context ends.
func TestRunProcessesEveryItem(t *testing.T) {
	b := leasememory.New(leasememory.Options{})
	src := leasequeue.NewMemorySource(leasequeue.MemoryOptions{})
	var ids []string
	for i := range 100 {
		ids = append(ids, fmt.Sprint("item-", i))
	}
	src.Enqueue(ids...)
	p := newPolicy(t, lease.PolicyOptions{TTL: 2 * time.Second})
	var ev events
	var left atomic.Int64
	left.Store(int64(len(ids)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := leasequeue.Options{Name: "q", Policy: p, Concurrency: 3, MaxAttempts: 2, PollEvery: 10 * time.Millisecond, Observer: &ev,
		RetryDelay: func(int) time.Duration { return 0 }}
	var wg sync.WaitGroup
	for w := range 3 {
		q, err := leasequeue.New(newClient(t, b, fmt.Sprint("w", w), nil), src, o)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			err := q.Run(ctx, func(ctx context.Context, c *leasequeue.Claim) error {
				if c.ID() == "item-7" || c.ID() == "item-42" {
					return errors.New("always fails")
				}
				if c.ID() == "item-13" {
					panic("boom")
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	eventually(t, 30*time.Second, "every item finished", func() bool {
		for _, id := range ids {
			if it, _ := src.Item(id); it.State != leasequeue.Done && it.State != leasequeue.Dead {
				return false
			}
		}
		return true
	})
	cancel()
	wg.Wait()
	for _, id := range ids {
		it, _ := src.Item(id)
		want := leasequeue.Done
		if id == "item-7" || id == "item-42" || id == "item-13" {
			want = leasequeue.Dead
		}
		if it.State != want {
			t.Errorf("%s: %+v; want %s", id, it, want)
		}
	}
	if n := len(all[*leasequeue.Failed](&ev)); n != 6 {
		t.Errorf("%d Failed events, want 6 (3 items, 2 attempts each)", n)
	}
}

// TestClaimNext: ClaimNext claims up to n ready items for a worker loop of
// one's own, none when none is ready; a released item is ready again.
func TestClaimNext(t *testing.T) {
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	b := leasememory.New(leasememory.Options{Clock: clock})
	src := leasequeue.NewMemorySource(leasequeue.MemoryOptions{Clock: clock})
	src.Enqueue("a", "b", "c")
	q := fakeQueue(t, b, src, "w", clock, leasequeue.Options{Name: "q", Policy: newPolicy(t, lease.PolicyOptions{TTL: 10 * time.Second})})
	ctx := context.Background()
	first, err := q.ClaimNext(ctx, 2)
	if err != nil || len(first) != 2 || first[0].ID() != "a" || first[1].ID() != "b" || first[0].Attempt() != 1 {
		t.Fatalf("ClaimNext(2) = %v, %v; want a and b at attempt 1", first, err)
	}
	rest, err := q.ClaimNext(ctx, 5)
	if err != nil || len(rest) != 1 || rest[0].ID() != "c" {
		t.Fatalf("ClaimNext(5) = %v, %v; want c", rest, err)
	}
	if none, err := q.ClaimNext(ctx, 5); err != nil || len(none) != 0 {
		t.Fatalf("ClaimNext with nothing ready = %v, %v; want none, no error", none, err)
	}
	if err := first[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := q.ClaimNext(ctx, 0) // counts as 1
	if err != nil || len(again) != 1 || again[0].ID() != "b" || again[0].Attempt() != 2 {
		t.Fatalf("ClaimNext after a release = %v, %v; want b at attempt 2", again, err)
	}
	for _, c := range []*leasequeue.Claim{first[0], rest[0], again[0]} {
		if err := c.Complete(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
