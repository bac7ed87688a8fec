package leaseservice_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseservice"
)

// recorder collects one service's transitions and what its function did,
// in order.
type recorder struct {
	mu     sync.Mutex
	events []string
	trs    []leaseservice.Transition
	ch     chan leaseservice.Transition
}

func newRecorder() *recorder { return &recorder{ch: make(chan leaseservice.Transition, 64)} }

func (r *recorder) note(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) transition(tr leaseservice.Transition) {
	r.mu.Lock()
	r.events = append(r.events, tr.Kind.String())
	r.trs = append(r.trs, tr)
	r.mu.Unlock()
	r.ch <- tr
}

func (r *recorder) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// until waits for the next transition of kind, failing the test on any
// other kind but Elected.
func (r *recorder) until(t *testing.T, kind leaseservice.TransitionKind) leaseservice.Transition {
	t.Helper()
	for {
		tr := next(t, r.ch)
		if tr.Kind == kind {
			return tr
		}
		if tr.Kind != leaseservice.Elected {
			t.Fatalf("transition %v (%v), want %v", tr.Kind, tr.Err, kind)
		}
	}
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
	}
}

// recv receives from ch, failing the test after 30s (a bound for a hung
// test, not a timing assertion).
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30s for %s", what)
	}
	var zero T
	return zero
}

// worker is a Func that notes when it starts and returns.
func (r *recorder) worker(cause chan<- error) leaseservice.Func {
	return func(ctx context.Context, h *lease.Handle) error {
		r.note("fn started")
		<-ctx.Done()
		if cause != nil {
			cause <- context.Cause(ctx)
		}
		r.note("fn returned")
		return nil
	}
}

// start runs s until the returned cancel is called, which waits for Run.
func start(t *testing.T, s *leaseservice.Service) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { _ = stopped() })
	return stopped
}

// TestShutdownHandsOffToSuccessor: a leader whose Run's context ends hands
// its lease off to the one other replica of its Successors, after its
// function returned and renewal stopped; the successor takes over with a
// higher token by that hand-off, not by racing for a free key.
func TestShutdownHandsOffToSuccessor(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	successors := []string{"a", "b"} // every replica gets the same list
	var recs = map[string]*recorder{"a": newRecorder(), "b": newRecorder()}
	svc := map[string]*leaseservice.Service{}
	for _, owner := range successors {
		s, err := leaseservice.New(client(t, mem, owner), "k", policy(t, 2*time.Second), recs[owner].worker(nil),
			leaseservice.Options{Successors: successors, OnTransition: recs[owner].transition})
		if err != nil {
			t.Fatal(err)
		}
		svc[owner] = s
	}
	stopA := start(t, svc["a"])
	elected := recs["a"].until(t, leaseservice.Elected)
	start(t, svc["b"])

	if err := stopA(); err != nil {
		t.Fatalf("a: Run = %v, want nil", err)
	}
	handed := recs["a"].until(t, leaseservice.HandedOff)
	if handed.Token != elected.Token || !slices.Equal(handed.Candidates, []string{"b"}) || handed.Err != nil {
		t.Fatalf("a's hand-off %+v, want token %d offered to [b]", handed, elected.Token)
	}
	if got, want := fmt.Sprint(recs["a"].log()), "[elected fn started fn returned handed off]"; got != want {
		t.Fatalf("a's term: %s, want %s", got, want)
	}
	next := recs["b"].until(t, leaseservice.Elected)
	if next.Token <= elected.Token {
		t.Fatalf("b elected with token %d, want above a's %d", next.Token, elected.Token)
	}
	r, err := mem.Inspect(context.Background(), "k")
	if err != nil || !r.Held || r.Owner != "b" || r.Token != next.Token {
		t.Fatalf("record %+v, %v: want held by b with token %d", r, err, next.Token)
	}
}

// TestShutdownHandsOffToPreferred: at shutdown a preferred candidate that
// waits for the key is preferred to Successors.
func TestShutdownHandsOffToPreferred(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	rec := newRecorder()
	s, err := leaseservice.New(client(t, mem, "a"), "k", policy(t, 2*time.Second), rec.worker(nil),
		leaseservice.Options{Successors: []string{"b"}, OnTransition: rec.transition})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, s)
	elected := rec.until(t, leaseservice.Elected)

	got := waitingPreferred(t, mem, "p")
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if tr := rec.until(t, leaseservice.HandedOff); !slices.Equal(tr.Candidates, []string{"p"}) {
		t.Fatalf("handed off to %v, want [p]", tr.Candidates)
	}
	h := recv(t, got, "the preferred candidate's Acquire")
	if h == nil || h.Token() <= elected.Token {
		t.Fatalf("preferred candidate's handle %v, want a token above %d", h, elected.Token)
	}
	releaseCtx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = h.Release(releaseCtx)
}

// waitingPreferred starts an Acquire of key k by a preferred client of
// owner, waits until the key records it as preferred, and returns where
// the Acquire's handle (nil on error) will be sent.
func waitingPreferred(t *testing.T, mem *leasememory.Store, owner string) <-chan *lease.Handle {
	t.Helper()
	got := acquirePreferred(t, mem, owner)
	waitFor(t, owner+" recorded as preferred", func() bool {
		r, err := mem.Inspect(context.Background(), "k")
		return err == nil && r.Preferred == owner
	})
	return got
}

// acquirePreferred starts an Acquire of key k by a preferred client of
// owner and returns where its handle (nil on error) will be sent.
func acquirePreferred(t *testing.T, mem *leasememory.Store, owner string) <-chan *lease.Handle {
	t.Helper()
	c, err := lease.NewClient(mem, lease.ClientOptions{Owner: owner, Preferred: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	got := make(chan *lease.Handle, 1)
	go func() {
		defer cancel()
		h, err := c.Acquire(ctx, "k", policy(t, 2*time.Second))
		if err != nil {
			t.Errorf("%s: Acquire = %v", owner, err)
		}
		got <- h
	}()
	return got
}

// noHandOff is a backend that cannot hand off.
type noHandOff struct{ lease.Backend }

// brokenHandOff is a HandOffer whose HandOff fails: after handing off if
// apply is set, else without doing anything.
type brokenHandOff struct {
	*leasememory.Store
	apply bool
}

func (b *brokenHandOff) HandOff(ctx context.Context, a lease.Acquisition, o lease.Offer) (lease.Token, error) {
	if b.apply {
		_, _ = b.Store.HandOff(ctx, a, o)
	}
	return 0, lease.Indeterminate(errors.New("reply lost"))
}

// TestFailedHandOffFallsBackToRelease: when the hand-off fails, the lease
// is released after it and Released reports the hand-off's error; a
// hand-off whose reply was lost but that happened is reported as one.
func TestFailedHandOffFallsBackToRelease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend func(*leasememory.Store) lease.Backend
		kind    leaseservice.TransitionKind
		ending  lease.Ending
		match   error
	}{
		{"unsupported", func(m *leasememory.Store) lease.Backend { return noHandOff{m} }, leaseservice.Released, lease.EndReleased, errors.ErrUnsupported},
		{"indeterminate", func(m *leasememory.Store) lease.Backend { return &brokenHandOff{Store: m} }, leaseservice.Released, lease.EndReleased, lease.ErrIndeterminate},
		{"indeterminate but handed off", func(m *leasememory.Store) lease.Backend { return &brokenHandOff{Store: m, apply: true} }, leaseservice.HandedOff, lease.EndHandedOff, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := leasememory.New(leasememory.Options{})
			rec := newRecorder()
			s, err := leaseservice.New(client(t, tc.backend(mem), "a"), "k", policy(t, 2*time.Second), rec.worker(nil),
				leaseservice.Options{Successors: []string{"b"}, OnTransition: rec.transition})
			if err != nil {
				t.Fatal(err)
			}
			stop := start(t, s)
			rec.until(t, leaseservice.Elected)
			if err := stop(); err != nil {
				t.Fatalf("Run = %v, want nil", err)
			}
			tr := rec.until(t, tc.kind)
			if tr.Err != nil || !errors.Is(tr.HandOffErr, tc.match) || (tc.match == nil) != (tr.HandOffErr == nil) {
				t.Fatalf("transition %+v, want %v with HandOffErr matching %v", tr, tc.kind, tc.match)
			}
			if r, _ := mem.Inspect(context.Background(), "k"); r.Held || r.Ending != tc.ending {
				t.Fatalf("record %+v, want free, ended %v", r, tc.ending)
			}
		})
	}
}

// TestYieldToPreferred: with YieldToPreferred the leader cancels its
// function with ErrYielded when a preferred candidate waits, hands the
// lease off to exactly that candidate once the function returned, and
// campaigns again as a follower; it leads again when the candidate
// releases.
func TestYieldToPreferred(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	rec := newRecorder()
	causes := make(chan error, 4)
	s, err := leaseservice.New(client(t, mem, "a"), "k", policy(t, 2*time.Second), rec.worker(causes),
		leaseservice.Options{YieldToPreferred: true, Successors: []string{"b"}, OnTransition: rec.transition})
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	elected := rec.until(t, leaseservice.Elected)

	got := acquirePreferred(t, mem, "p") // yielded to at once: no time to see it recorded
	if cause := recv(t, causes, "the function's cancellation"); !errors.Is(cause, leaseservice.ErrYielded) {
		t.Fatalf("function's context cause %v, want ErrYielded", cause)
	}
	tr := rec.until(t, leaseservice.HandedOff)
	if tr.Token != elected.Token || !slices.Equal(tr.Candidates, []string{"p"}) {
		t.Fatalf("hand-off %+v, want token %d offered to [p]", tr, elected.Token)
	}
	h := recv(t, got, "the preferred candidate's Acquire")
	if h == nil || h.Token() <= elected.Token {
		t.Fatalf("preferred candidate's handle %v, want a token above %d", h, elected.Token)
	}
	if s.IsLeader() {
		t.Fatal("IsLeader after yielding")
	}
	if err := s.Check(); err != nil {
		t.Fatalf("Check while campaigning after the yield = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if again := rec.until(t, leaseservice.Elected); again.Token <= h.Token() {
		t.Fatalf("elected again with token %d, want above %d", again.Token, h.Token())
	}
}

// TestYieldWaitsForTheFunction: a leader whose function ignores the
// cancellation keeps the lease until the function returns; the preferred
// candidate gets it only then.
func TestYieldWaitsForTheFunction(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	rec := newRecorder()
	cancelled := make(chan struct{})
	finish := make(chan struct{})
	fn := func(ctx context.Context, h *lease.Handle) error {
		<-ctx.Done()
		close(cancelled)
		<-finish // ignores the cancellation until told
		return nil
	}
	s, err := leaseservice.New(client(t, mem, "a"), "k", policy(t, 500*time.Millisecond), fn,
		leaseservice.Options{YieldToPreferred: true, OnTransition: rec.transition})
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	release := sync.OnceFunc(func() { close(finish) })
	t.Cleanup(release) // before Run is stopped, should the test fail
	elected := rec.until(t, leaseservice.Elected)
	got := acquirePreferred(t, mem, "p")
	recv(t, cancelled, "the function's cancellation")
	// Renewal goes on: the lease outlives two TTLs while the function
	// runs.
	waitFor(t, "renewals past the first TTL", func() bool {
		r, _ := mem.Inspect(context.Background(), "k")
		return r.Held && r.Owner == "a" && r.Token == elected.Token && r.RenewedAt.Sub(r.AcquiredAt) > time.Second
	})
	select {
	case h := <-got:
		t.Fatalf("the preferred candidate got the key (%v) while the leader's function ran", h)
	default:
	}
	release()
	if tr := rec.until(t, leaseservice.HandedOff); !slices.Equal(tr.Candidates, []string{"p"}) {
		t.Fatalf("handed off to %v, want [p]", tr.Candidates)
	}
	if h := recv(t, got, "the preferred candidate's Acquire"); h == nil || h.Token() <= elected.Token {
		t.Fatalf("preferred candidate's handle %v, want a token above %d", h, elected.Token)
	}
}

// TestServiceObserve: Service.Observe reports the service's key: its own
// term, then the hand-off at shutdown.
func TestServiceObserve(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	rec := newRecorder()
	s, err := leaseservice.New(client(t, mem, "a"), "k", policy(t, 2*time.Second), rec.worker(nil),
		leaseservice.Options{Successors: []string{"b"}, OnTransition: rec.transition})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stop := start(t, s)
	var seen []string
	for o, err := range s.Observe(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, fmt.Sprintf("%v %s %v", o.Change, o.Owner, o.Candidates))
		switch {
		case o.Held && o.Owner == "a":
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		case o.Change == lease.ChangeHandedOff:
			cancel()
		}
	}
	if last := seen[len(seen)-1]; last != "handed off a [b]" {
		t.Fatalf("observed %q, want it to end with the hand-off to b", seen)
	}
}

// TestPreferredServiceTakesOver: a service built on a client with
// ClientOptions.Preferred campaigns as a preferred candidate, so a leader
// with YieldToPreferred hands its lease to it.
func TestPreferredServiceTakesOver(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	old, newer := newRecorder(), newRecorder()
	a, err := leaseservice.New(client(t, mem, "old"), "k", policy(t, 2*time.Second), old.worker(nil),
		leaseservice.Options{YieldToPreferred: true, OnTransition: old.transition})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	first := old.until(t, leaseservice.Elected)
	pc, err := lease.NewClient(mem, lease.ClientOptions{Owner: "newer", Preferred: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := leaseservice.New(pc, "k", policy(t, 2*time.Second), newer.worker(nil),
		leaseservice.Options{OnTransition: newer.transition})
	if err != nil {
		t.Fatal(err)
	}
	start(t, b)
	if tr := old.until(t, leaseservice.HandedOff); !slices.Equal(tr.Candidates, []string{"newer"}) {
		t.Fatalf("the old leader's hand-off %+v, want it offered to [newer]", tr)
	}
	if tr := newer.until(t, leaseservice.Elected); tr.Token <= first.Token {
		t.Fatalf("the preferred service was elected with token %d, want above %d", tr.Token, first.Token)
	}
}
