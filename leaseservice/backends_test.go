package leaseservice_test

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

	"github.com/golib/lease/internal/testkit/backendenv"
	"github.com/golib/lease/internal/testkit/stall"
	"github.com/golib/lease/internal/testkit/tcpproxy"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseservice"
)

// The tests in this file run leaseservice on real Valkey and PostgreSQL
// servers, each contender on its own connection, as replicas would. They
// judge "never two at once" by fenced writes: every term writes its token
// to one fenced resource while it runs, and a write rejected as stale while
// its writer still believed it was leader is an overlap. Timings are only
// logged; the only assertions on time are safety orderings ("the old
// term's context was cancelled before the new term started").

// realPolicy is the policy of these tests: a TTL of 2s leaves room for a
// loaded machine, and a short Retry keeps the polling fallback quick.
func realPolicy(t *testing.T, retry time.Duration) lease.Policy {
	t.Helper()
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 2 * time.Second, OperationTimeout: 250 * time.Millisecond, Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// arena is the shared world of one test: the fenced resource and what the
// terms did to it.
type arena struct {
	t     *testing.T
	fence backendenv.Fence

	mu        sync.Mutex
	running   int         // terms whose context is live
	overlaps  int         // terms that started while another was live
	staleLive int         // fenced writes rejected while their writer was live
	writes    int         // accepted writes
	log       []termEvent // transitions and ends, in order
	start     time.Time
}

type termEvent struct {
	at    time.Duration // since the arena started
	owner string
	kind  leaseservice.TransitionKind
	token lease.Token
}

func newArena(t *testing.T, f backendenv.Fence) *arena {
	return &arena{t: t, fence: f, start: time.Now()}
}

// observe returns an OnTransition callback that logs owner's transitions.
func (a *arena) observe(owner string) func(leaseservice.Transition) {
	return func(tr leaseservice.Transition) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.log = append(a.log, termEvent{at: time.Since(a.start), owner: owner, kind: tr.Kind, token: tr.Token})
	}
}

// work returns a Func that writes its token to the fenced resource every
// 20ms until hold has passed (hold ≤ 0: until its context ends). It reports
// when its context ended on ended, if not nil.
func (a *arena) work(hold time.Duration, ended chan<- time.Time) leaseservice.Func {
	return func(ctx context.Context, h *lease.Handle) error {
		a.mu.Lock()
		a.running++
		if a.running > 1 {
			a.overlaps++
		}
		a.mu.Unlock()
		leave := sync.OnceFunc(func() {
			a.mu.Lock()
			a.running--
			a.mu.Unlock()
			if ended != nil {
				ended <- time.Now()
			}
		})
		defer leave()
		defer context.AfterFunc(ctx, leave)()

		var until <-chan time.Time
		if hold > 0 {
			until = time.After(hold)
		}
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			ok, err := a.fence.Write(ctx, h.Snapshot(), "resource")
			if err == nil {
				a.mu.Lock()
				if ok {
					a.writes++
				} else if ctx.Err() == nil {
					a.staleLive++
				}
				a.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return nil
			case <-until:
				return nil
			case <-tick.C:
			}
		}
	}
}

// check fails the test if terms overlapped.
func (a *arena) check() {
	a.t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.overlaps != 0 || a.staleLive != 0 {
		a.t.Errorf("%d terms started while another was live; %d fenced writes were rejected while their writer was live", a.overlaps, a.staleLive)
	}
	if a.writes == 0 {
		a.t.Error("no fenced write was accepted: the judge saw nothing")
	}
}

// handOvers returns, for each Released followed by another owner's
// Elected, the time between them.
func (a *arena) handOvers() []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []time.Duration
	for i, e := range a.log {
		if e.kind != leaseservice.Released {
			continue
		}
		for _, f := range a.log[i+1:] {
			if f.kind == leaseservice.Elected {
				if f.owner != e.owner {
					out = append(out, f.at-e.at)
				}
				break
			}
		}
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// contend runs one contender until ctx ends: terms of hold, with a rest of
// 30ms between them so that the others get their turn.
func contend(ctx context.Context, t *testing.T, a *arena, b lease.Backend, owner string, p lease.Policy, hold time.Duration) error {
	c := client(t, b, owner)
	for ctx.Err() == nil {
		err := leaseservice.Run(ctx, c, "singleton", p, a.work(hold, nil),
			leaseservice.Options{Once: true, OnTransition: a.observe(owner)})
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Millisecond):
		}
	}
	return nil
}

func TestContendersOnRealBackends(t *testing.T) {
	t.Parallel()
	for _, kind := range backendenv.Kinds {
		for _, n := range []int{2, 5} {
			t.Run(fmt.Sprintf("%s/%d", kind.Name, n), func(t *testing.T) {
				t.Parallel()
				env := kind.Env(t)
				a := newArena(t, env.Fence)
				p := realPolicy(t, 0)
				ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
				defer cancel()
				var wg sync.WaitGroup
				errs := make([]error, n)
				for i := range n {
					b := env.NewBackend(t, env.Addr)
					wg.Go(func() { errs[i] = contend(ctx, t, a, b, fmt.Sprintf("replica-%d", i), p, 150*time.Millisecond) })
				}
				wg.Wait()
				for i, err := range errs {
					if err != nil {
						t.Errorf("replica %d: Run = %v", i, err)
					}
				}
				a.check()
				h := a.handOvers()
				t.Logf("%s, %d contenders: %d accepted fenced writes, %d hand-overs to another contender, median %v",
					kind.Name, n, a.writes, len(h), median(h))
			})
		}
	}
}

// watchCounter passes a backend's release notifications through and counts
// them, so that a test can tell they woke the waiting contender.
type watchCounter struct {
	lease.Backend
	w     lease.ReleaseWatcher
	wakes atomic.Int64
}

func (b *watchCounter) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	in, stop, err := b.w.WatchReleases(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	out := make(chan struct{}, 1)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-in:
				b.wakes.Add(1)
				select {
				case out <- struct{}{}:
				default:
				}
			case <-quit:
				return
			}
		}
	}()
	return out, sync.OnceFunc(func() { close(quit); <-done; stop() }), nil
}

// TestHandOverUsesReleaseNotifications measures the clean hand-over: a
// leader ends its term and releases, and a contender that waits for the
// lease takes over. Retry is long (500ms), so a hand-over that waited for
// the next retry would show; the median is logged, and the test checks
// that the waiting contender was woken by the backend's release
// notifications (lease.ReleaseWatcher).
func TestHandOverUsesReleaseNotifications(t *testing.T) {
	t.Parallel()
	for _, kind := range backendenv.Kinds {
		t.Run(kind.Name, func(t *testing.T) {
			t.Parallel()
			env := kind.Env(t)
			a := newArena(t, env.Fence)
			p := realPolicy(t, 500*time.Millisecond)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var counters []*watchCounter
			var wg sync.WaitGroup
			for i := range 2 {
				b := env.NewBackend(t, env.Addr)
				w, ok := b.(lease.ReleaseWatcher)
				if !ok {
					t.Fatalf("%T is not a lease.ReleaseWatcher", b)
				}
				wc := &watchCounter{Backend: b, w: w}
				counters = append(counters, wc)
				wg.Go(func() {
					if err := contend(ctx, t, a, wc, fmt.Sprintf("replica-%d", i), p, 200*time.Millisecond); err != nil {
						t.Errorf("replica %d: %v", i, err)
					}
				})
			}
			deadline := time.Now().Add(20 * time.Second)
			for len(a.handOvers()) < 10 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			cancel()
			wg.Wait()
			a.check()
			h := a.handOvers()
			wakes := counters[0].wakes.Load() + counters[1].wakes.Load()
			t.Logf("%s: %d hand-overs, median %v (min %v, max %v); %d release notifications received",
				kind.Name, len(h), median(h), slices.Min(h), slices.Max(h), wakes)
			if wakes == 0 {
				t.Error("no release notification reached a waiting contender: hand-overs waited for Retry")
			}
		})
	}
}

// TestLeaderCutOffLosesAndAnotherTakesOver cuts the leader's connections
// to the server (through a proxy that then refuses new ones) and checks
// that its function's context is cancelled, with a cause wrapping
// ErrLost, before another contender's term starts.
func TestLeaderCutOffLosesAndAnotherTakesOver(t *testing.T) {
	t.Parallel()
	for _, kind := range backendenv.Kinds {
		t.Run(kind.Name, func(t *testing.T) {
			t.Parallel()
			env := kind.Env(t)
			proxy := tcpproxy.Start(t, env.Addr)
			takeOver(t, env, env.NewBackend(t, proxy.Addr()), func() {
				proxy.Refuse(true)
				proxy.Cut()
			}, func() { proxy.Refuse(false) })
		})
	}
}

// TestServerPausedPastTheTTL pauses the server (SIGSTOP) for longer than
// the TTL: the leader's context is cancelled at its local deadline, while
// the server is still paused, and after the server resumes another
// contender takes over.
func TestServerPausedPastTheTTL(t *testing.T) {
	t.Parallel()
	for _, kind := range backendenv.DedicatedKinds {
		t.Run(kind.Name, func(t *testing.T) {
			t.Parallel()
			env, srv := kind.Env(t)
			var resumed atomic.Bool
			t.Cleanup(func() {
				if !resumed.Load() {
					srv.Resume()
				}
			})
			ttl := realPolicy(t, 0).TTL()
			takeOver(t, env, env.NewBackend(t, env.Addr), func() {
				srv.Pause()
				time.Sleep(ttl + ttl/2)
				srv.Resume()
				resumed.Store(true)
			}, nil)
		})
	}
}

// takeOver elects leader (a backend the fault will hit), starts two
// healthy contenders, injects the fault, and checks the loss and the
// takeover. heal, if not nil, undoes the fault at the end.
func takeOver(t *testing.T, env *backendenv.Env, leader lease.Backend, fault, heal func()) {
	a := newArena(t, env.Fence)
	p := realPolicy(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	elected := make(chan *lease.Handle, 1)
	ended := make(chan time.Time, 1)
	cause := make(chan error, 1)
	fn := a.work(0, ended)
	leaderDone := make(chan error, 1)
	go func() {
		leaderDone <- leaseservice.Run(ctx, client(t, leader, "leader"), "singleton", p,
			func(ctx context.Context, h *lease.Handle) error {
				elected <- h
				defer func() { cause <- context.Cause(ctx) }()
				return fn(ctx, h)
			},
			leaseservice.Options{Once: true, OnTransition: a.observe("leader")})
	}()
	var h *lease.Handle
	select {
	case h = <-elected:
	case err := <-leaderDone:
		t.Fatalf("leader's Run = %v before it was elected", err)
	}

	// Two healthy contenders wait for the lease.
	others, stopOthers := context.WithCancel(ctx)
	defer stopOthers()
	type term struct {
		owner   string
		token   lease.Token
		started time.Time
	}
	next := make(chan term, 2)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range 2 {
		owner := fmt.Sprintf("healthy-%d", i)
		c := client(t, env.NewBackend(t, env.Addr), owner)
		wg.Go(func() {
			err := leaseservice.Run(others, c, "singleton", p,
				func(ctx context.Context, h *lease.Handle) error {
					select {
					case next <- term{owner, h.Token(), time.Now()}:
					default:
					}
					return a.work(0, nil)(ctx, h)
				}, leaseservice.Options{OnTransition: a.observe(owner)})
			switch {
			case errors.Is(err, lease.ErrIndeterminate):
				// Its release at shutdown went unanswered within
				// OperationTimeout on a busy machine; Run says so, as it
				// must (TestShutdownReportsReleaseError).
				t.Logf("%s: Run = %v", owner, err)
			case err != nil:
				t.Errorf("%s: Run = %v", owner, err)
			}
		})
	}
	time.Sleep(300 * time.Millisecond) // let the leader write and renew
	stalls := stall.Start(t)
	faultAt := time.Now()
	fault()
	if heal != nil {
		defer heal()
	}

	var endedAt time.Time
	select {
	case endedAt = <-ended:
	case <-ctx.Done():
		t.Fatal("the leader's context was never cancelled")
	}
	deadline := h.Deadline()
	stalled := stalls.Within(deadline, endedAt)
	t.Logf("%s: the leader's context ended %v after the fault, %v after its local deadline (negative: before; the process was stalled %v of it)",
		env.Name, endedAt.Sub(faultAt).Round(time.Millisecond), endedAt.Sub(deadline).Round(time.Millisecond), stalled.Round(time.Millisecond))
	// The backend's expiry is SafetyMargin after the local deadline: the
	// context must end before it, but for the time the process did not run.
	if expiry := deadline.Add(p.Options().SafetyMargin); !endedAt.Add(-stalled).Before(expiry) {
		t.Errorf("%s: the leader's context ended at %v, not before the backend's expiry at %v (local deadline %v, stalled %v)",
			env.Name, endedAt, expiry, deadline, stalled)
	}
	if err := <-cause; !errors.Is(err, lease.ErrLost) {
		t.Errorf("the leader's context cause = %v, want one wrapping lease.ErrLost", err)
	}

	var nt term
	select {
	case nt = <-next:
	case <-ctx.Done():
		t.Fatal("no other contender took over")
	}
	t.Logf("%s: %s took over with token %d, %v after the leader's context ended",
		env.Name, nt.owner, nt.token, nt.started.Sub(endedAt).Round(time.Millisecond))
	if !nt.started.After(endedAt) {
		t.Errorf("%s's term started %v before the leader's context ended", nt.owner, endedAt.Sub(nt.started))
	}
	if nt.token <= h.Token() {
		t.Errorf("takeover token %d, want above the leader's %d", nt.token, h.Token())
	}
	if err := <-leaderDone; err != nil {
		t.Errorf("leader's Run after the loss = %v, want nil", err)
	}
	stopOthers()
	wg.Wait()
	a.check()
}

// TestFailedLeaderHandsOverAndRunsAgain: the leader's function fails once;
// its lease is released at once, so a waiting replica takes over during
// the leader's restart pause, and when that replica steps down the old
// leader, which campaigned again after its pause, runs its function
// again. Terms never overlap (judged by the fence), tokens grow, and both
// replicas report healthy throughout.
func TestFailedLeaderHandsOverAndRunsAgain(t *testing.T) {
	t.Parallel()
	for _, kind := range backendenv.Kinds {
		t.Run(kind.Name, func(t *testing.T) {
			t.Parallel()
			env := kind.Env(t)
			ar := newArena(t, env.Fence)
			p := realPolicy(t, 0)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			type event struct {
				owner string
				tr    leaseservice.Transition
			}
			events := make(chan event, 64)
			observe := func(owner string) func(leaseservice.Transition) {
				record := ar.observe(owner)
				return func(tr leaseservice.Transition) { record(tr); events <- event{owner, tr} }
			}
			var calls atomic.Int32
			work := ar.work(0, nil)
			a, err := leaseservice.New(client(t, env.NewBackend(t, env.Addr), "a"), "singleton", p,
				func(ctx context.Context, h *lease.Handle) error {
					if calls.Add(1) == 1 {
						if _, err := env.Fence.Write(ctx, h.Snapshot(), "resource"); err != nil {
							return err
						}
						return errors.New("disk full")
					}
					return work(ctx, h)
				}, leaseservice.Options{RestartDelay: 5 * time.Second, OnTransition: observe("a")})
			if err != nil {
				t.Fatal(err)
			}
			// b leads for a second, then steps down and keeps out for
			// long enough that a, back from its pause, takes over.
			b, err := leaseservice.New(client(t, env.NewBackend(t, env.Addr), "b"), "singleton", p,
				ar.work(time.Second, nil), leaseservice.Options{Rest: 20 * time.Second, OnTransition: observe("b")})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			wg.Go(func() {
				if err := a.Run(ctx); err != nil {
					t.Errorf("a: Run = %v", err)
				}
			})
			var seq []string
			var tokens []lease.Token
			bStarted := false
			for len(seq) < 4 {
				var e event
				select {
				case e = <-events:
				case <-ctx.Done():
					t.Fatalf("transitions so far: %v", seq)
				}
				switch e.tr.Kind {
				case leaseservice.Elected:
					tokens = append(tokens, e.tr.Token)
				case leaseservice.Failed:
					if e.tr.Err == nil || e.tr.Err.Error() != "disk full" || e.tr.RestartIn <= 0 {
						t.Fatalf("%s: %+v, want Failed with disk full and a pause", e.owner, e.tr)
					}
				default:
					continue
				}
				seq = append(seq, e.owner+" "+e.tr.Kind.String())
				if !bStarted { // b joins once a leads
					bStarted = true
					wg.Go(func() {
						if err := b.Run(ctx); err != nil {
							t.Errorf("b: Run = %v", err)
						}
					})
				}
				for name, s := range map[string]*leaseservice.Service{"a": a, "b": b} {
					if err := s.Check(); err != nil && (name == "a" || bStarted && b.IsLeader()) {
						t.Errorf("%s: Check after %v = %v", name, seq, err)
					}
				}
			}
			cancel()
			wg.Wait()
			if got := strings.Join(seq, ", "); got != "a elected, a failed, b elected, a elected" {
				t.Fatalf("transitions %q, want a elected, a failed, b elected, a elected", got)
			}
			if !slices.IsSorted(tokens) || tokens[0] == tokens[1] || tokens[1] == tokens[2] {
				t.Errorf("tokens %v, want growing", tokens)
			}
			ar.check()
		})
	}
}
