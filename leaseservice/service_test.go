package leaseservice_test

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
	"github.com/golib/lease/leaseservice"
)

func policy(t *testing.T, ttl time.Duration) lease.Policy {
	t.Helper()
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: ttl, Retry: ttl / 20})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func client(t *testing.T, b lease.Backend, owner string) *lease.Client {
	t.Helper()
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// referee checks that terms never overlap, by a counter and by a fence.
type referee struct {
	running atomic.Int32
	overlap atomic.Int32
	terms   atomic.Int32
	mu      sync.Mutex
	last    lease.Token
	stale   int
}

func (r *referee) term(ctx context.Context, h *lease.Handle, hold time.Duration) error {
	if r.running.Add(1) > 1 {
		r.overlap.Add(1)
	}
	defer r.running.Add(-1)
	r.terms.Add(1)
	r.mu.Lock()
	if h.Token() < r.last {
		r.stale++
	}
	r.last = h.Token()
	r.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-time.After(hold):
	}
	return nil
}

func TestContendersNeverOverlap(t *testing.T) {
	for _, n := range []int{2, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			backend := leasememory.New(leasememory.Options{})
			var ref referee
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				c := client(t, backend, fmt.Sprintf("replica-%d", i))
				wg.Go(func() {
					errs[i] = leaseservice.Run(ctx, c, "singleton", policy(t, 300*time.Millisecond),
						func(ctx context.Context, h *lease.Handle) error { return ref.term(ctx, h, 50*time.Millisecond) },
						leaseservice.Options{})
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("replica %d: Run = %v", i, err)
				}
			}
			if ref.overlap.Load() != 0 || ref.stale != 0 {
				t.Fatalf("%d overlapping terms, %d stale tokens", ref.overlap.Load(), ref.stale)
			}
			if ref.terms.Load() < 3 {
				t.Fatalf("only %d terms in 1.5s of 50ms terms", ref.terms.Load())
			}
			if r, _ := backend.Inspect(context.Background(), "singleton"); r.Held {
				t.Fatalf("lease still held after every Run returned: %+v", r)
			}
		})
	}
}

// failingRenewals fails every renewal while fail is set.
type failingRenewals struct {
	lease.Backend
	fail    atomic.Bool
	release error
}

func (b *failingRenewals) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	if b.fail.Load() {
		return errors.New("connection refused")
	}
	return b.Backend.Renew(ctx, a, ttl)
}

func (b *failingRenewals) Release(ctx context.Context, a lease.Acquisition) error {
	if b.release != nil {
		return b.release
	}
	return b.Backend.Release(ctx, a)
}

func TestLossCancelsTheFunctionAndAnotherTakesOver(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	sick := &failingRenewals{Backend: mem}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var transitions []leaseservice.Transition
	var tmu sync.Mutex
	causes := make(chan error, 1)
	elected := make(chan lease.Token, 1)
	first, err := leaseservice.New(client(t, sick, "sick"), "k", policy(t, 300*time.Millisecond),
		func(ctx context.Context, h *lease.Handle) error {
			elected <- h.Token()
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		},
		leaseservice.Options{Once: true, OnTransition: func(tr leaseservice.Transition) {
			tmu.Lock()
			transitions = append(transitions, tr)
			tmu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Run(ctx) }()
	tok := <-elected
	if !first.IsLeader() {
		t.Fatal("IsLeader false during the term")
	}
	deadline := first.Handle().Deadline()
	sick.fail.Store(true)

	cause := <-causes
	if !errors.Is(cause, lease.ErrLost) {
		t.Fatalf("function's context cause = %v, want ErrLost", cause)
	}
	if late := time.Since(deadline); late > 100*time.Millisecond {
		t.Logf("loss reported %v after the local deadline", late) // informative only: the machine may be loaded
	}
	if err := <-firstDone; err != nil {
		t.Fatalf("Run after a loss = %v, want nil", err)
	}
	if first.IsLeader() {
		t.Fatal("IsLeader true after the loss")
	}
	tmu.Lock()
	kinds := []leaseservice.TransitionKind{}
	for _, tr := range transitions {
		kinds = append(kinds, tr.Kind)
	}
	tmu.Unlock()
	if fmt.Sprint(kinds) != "[elected lost]" {
		t.Fatalf("transitions %v, want [elected lost]", kinds)
	}

	// A healthy contender takes over once the lease expires on the backend.
	second := make(chan lease.Token, 1)
	err = leaseservice.Run(ctx, client(t, mem, "healthy"), "k", policy(t, 300*time.Millisecond),
		func(ctx context.Context, h *lease.Handle) error { second <- h.Token(); return nil },
		leaseservice.Options{Once: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-second; got <= tok {
		t.Fatalf("takeover token %d, want above %d", got, tok)
	}
}

func TestShutdownWaitsForFunctionAndRelease(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	returned := atomic.Bool{}
	running := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- leaseservice.Run(ctx, client(t, mem, "svc"), "k", policy(t, time.Second),
			func(ctx context.Context, h *lease.Handle) error {
				close(running)
				<-ctx.Done()
				time.Sleep(50 * time.Millisecond) // cleanup work
				returned.Store(true)
				return ctx.Err()
			}, leaseservice.Options{})
	}()
	<-running
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after shutdown = %v, want nil", err)
	}
	if !returned.Load() {
		t.Fatal("Run returned before the function did")
	}
	if r, _ := mem.Inspect(context.Background(), "k"); r.Held {
		t.Fatal("lease not released on shutdown")
	}
}

func TestShutdownReportsReleaseError(t *testing.T) {
	releaseErr := lease.Indeterminate(errors.New("timeout"))
	b := &failingRenewals{Backend: leasememory.New(leasememory.Options{}), release: releaseErr}
	ctx, cancel := context.WithCancel(context.Background())
	var last leaseservice.Transition
	err := leaseservice.Run(ctx, client(t, b, "svc"), "k", policy(t, time.Second),
		func(ctx context.Context, h *lease.Handle) error { cancel(); <-ctx.Done(); return nil },
		leaseservice.Options{OnTransition: func(tr leaseservice.Transition) { last = tr }})
	if !errors.Is(err, lease.ErrIndeterminate) {
		t.Fatalf("Run = %v, want the release's indeterminate error", err)
	}
	if last.Kind != leaseservice.Released || !errors.Is(last.Err, lease.ErrIndeterminate) {
		t.Fatalf("last transition %+v, want Released with the error", last)
	}
}

// TestStopOnErrorReturnsFunctionErrors: with StopOnError, an error or a
// panic of the function ends Run, after the release.
func TestStopOnErrorReturnsFunctionErrors(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	boom := errors.New("boom")
	err := leaseservice.Run(context.Background(), client(t, mem, "svc"), "k", policy(t, time.Second),
		func(ctx context.Context, h *lease.Handle) error { return boom }, leaseservice.Options{StopOnError: true})
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
	if r, _ := mem.Inspect(context.Background(), "k"); r.Held {
		t.Fatal("lease not released after the function failed")
	}
	err = leaseservice.Run(context.Background(), client(t, mem, "svc"), "k", policy(t, time.Second),
		func(ctx context.Context, h *lease.Handle) error { panic("kaboom") }, leaseservice.Options{StopOnError: true})
	if fmt.Sprint(err) != `leaseservice: "k": function panicked: kaboom` {
		t.Fatalf("Run with a panicking function = %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	c := client(t, leasememory.New(leasememory.Options{}), "svc")
	fn := func(context.Context, *lease.Handle) error { return nil }
	p := policy(t, time.Second)
	for name, err := range map[string]error{
		"nil client": func() error { _, err := leaseservice.New(nil, "k", p, fn, leaseservice.Options{}); return err }(),
		"nil fn":     func() error { _, err := leaseservice.New(c, "k", p, nil, leaseservice.Options{}); return err }(),
		"bad key":    func() error { _, err := leaseservice.New(c, "", p, fn, leaseservice.Options{}); return err }(),
		"zero policy": func() error {
			_, err := leaseservice.New(c, "k", lease.Policy{}, fn, leaseservice.Options{})
			return err
		}(),
	} {
		if err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// TestRestLetsAnotherReplicaLead: a function that returns at once steps
// down; with Rest, another replica leads next instead of the same one
// winning its lease straight back.
func TestRestLetsAnotherReplicaLead(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var leaders []string
	var wg sync.WaitGroup
	for _, owner := range []string{"a", "b"} {
		c := client(t, mem, owner)
		wg.Go(func() {
			// Each term lasts 200ms and Rest 600ms, so from the third
			// term on the other replica's rest ends just as a term does:
			// it finds the key free, or held and is then woken by the
			// release, even one that lands while it sets up its watch
			// (lease.ReleaseWatcher). Rest keeps the leader out for
			// 600ms, the other's margin to take the key.
			err := leaseservice.Run(ctx, c, "k", policy(t, 2*time.Second),
				func(ctx context.Context, h *lease.Handle) error {
					mu.Lock()
					leaders = append(leaders, owner)
					if len(leaders) == 4 {
						cancel()
					}
					mu.Unlock()
					select {
					case <-ctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
					return nil
				}, leaseservice.Options{Rest: 600 * time.Millisecond})
			if err != nil {
				t.Errorf("%s: Run = %v", owner, err)
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(leaders); i++ {
		if leaders[i] == leaders[i-1] {
			t.Fatalf("terms %v: the same replica led twice in a row despite Rest", leaders)
		}
	}
}
