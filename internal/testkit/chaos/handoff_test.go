package chaos_test

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

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// owned is a grant to owner.
func owned(lane, acq, owner string, token uint64, call, ret, ttl int64) chaos.Op {
	op := grant(lane, acq, token, call, ret, ttl)
	op.Owner = owner
	return op
}

// handOff is a hand-off of acquisition acq (token) to cands for window
// ms, which returned the offered token out when OK.
func handOff(lane, acq string, token uint64, cands []string, window int64, outcome chaos.Outcome, out uint64, call, ret int64) chaos.Op {
	return chaos.Op{Lane: lane, Kind: chaos.KindHandOff, Key: "k", Acq: acq, Token: token, Candidates: cands, TTL: window * ms,
		Outcome: outcome, Out: out, Call: t0 + call*ms, Return: t0 + ret*ms}
}

// observed is a state an observer reported: held by owner, offered to
// cands, or free; token is the record's.
func observed(held bool, owner string, token uint64, cands []string, call, ret int64) chaos.Op {
	return chaos.Op{Lane: "o/0", Kind: chaos.KindObserve, Key: "k", Held: held, Owner: owner, Out: token, Candidates: cands,
		Outcome: chaos.OK, Call: t0 + call*ms, Return: t0 + ret*ms}
}

// lossy is a fault that lost the lease store's data.
func lossy(call, ret int64) chaos.Op {
	return chaos.Op{Lane: "nemesis", Kind: chaos.KindFault, Fault: "kill -9", LostData: true, Outcome: chaos.OK,
		Call: t0 + call*ms, Return: t0 + ret*ms}
}

// preferredBy is an acquire by owner, asking to be preferred, refused
// because the acquisition with token holder holds the key.
func preferredBy(lane, acq, owner string, holder uint64, call, ret int64) chaos.Op {
	op := refused(lane, acq, holder, call, ret)
	op.Owner, op.Holder, op.Preferred = owner, "a", true
	return op
}

// observedPreferred is an observation of the key held by owner with
// token, pref its preferred candidate.
func observedPreferred(owner string, token uint64, pref string, call, ret int64) chaos.Op {
	op := observed(true, owner, token, nil, call, ret)
	op.PreferredOwner = pref
	return op
}

// TestModelHandOff runs the checker on small histories with hand-offs
// and observations, legal and not: each rule the model learnt for them.
func TestModelHandOff(t *testing.T) {
	t.Setenv(chaos.EnvOut, t.TempDir())
	const ttl = 1000 * ms
	b := []string{"b"}
	cases := []struct {
		name  string
		ops   []chaos.Op
		legal bool
		want  string // a part of the first problem
	}{
		{"a hand-off taken by its candidate with the offered token", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			owned("b/0", "B", "b", 2, 120, 130, ttl),
			leaseOp(chaos.KindRenew, "b/0", "B", 2, chaos.OK, 300, 310, ttl),
		}, true, ""},
		{"a hand-off lapses, then anyone with a higher token", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			refused("c/0", "C", 2, 200, 210),
			owned("c/0", "C2", "c", 3, 700, 710, ttl),
		}, true, ""},
		{"a non-candidate granted during the window", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			owned("c/0", "C", "c", 3, 200, 210, ttl),
		}, false, "lease k: not linearizable"},
		{"a non-candidate granted the offered token", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			owned("c/0", "C", "c", 2, 200, 210, ttl),
		}, false, "lease k: not linearizable"},
		{"a candidate granted a token other than the offered one during the window", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			owned("b/0", "B", "b", 3, 200, 210, ttl),
		}, false, "lease k: not linearizable"},
		{"the offered token granted after the offer lapsed", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 100, chaos.OK, 2, 100, 110),
			owned("b/0", "B", "b", 2, 400, 410, ttl),
		}, false, "lease k: not linearizable"},
		{"the old holder renews after its hand-off", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			leaseOp(chaos.KindRenew, "a/1", "A", 1, chaos.OK, 200, 210, ttl),
		}, false, "lease k: not linearizable"},
		{"the old holder releases after its successor was granted", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			owned("b/0", "B", "b", 2, 120, 130, ttl),
			leaseOp(chaos.KindRelease, "a/1", "A", 1, chaos.OK, 200, 210, 0),
		}, false, "lease k: not linearizable"},
		{"a hand-off whose token does not rise", []chaos.Op{
			owned("a/0", "A", "a", 5, 0, 10, ttl),
			handOff("a/0", "A", 5, b, 500, chaos.OK, 5, 100, 110),
		}, false, "lease k: not linearizable"},
		{"a hand-off by an acquisition that was superseded", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, 100*ms),
			owned("c/0", "C", "c", 2, 200, 210, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 3, 300, 310),
		}, false, "lease k: not linearizable"},
		{"a hand-off that kept its holder: two holders", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			observed(true, "a", 1, nil, 200, 210),
		}, false, "lease k: not linearizable"},
		{"a hand-off with an unknown outcome, taken by its candidate", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.Unknown, 0, 100, 110),
			owned("b/0", "B", "b", 7, 150, 160, ttl),
		}, true, ""},
		{"a hand-off with an unknown outcome, a non-candidate granted during the window", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, 50*ms),
			handOff("a/0", "A", 1, b, 500, chaos.Unknown, 0, 20, 30),
			owned("c/0", "C", "c", 7, 150, 160, ttl),
		}, true, ""}, // the hand-off may not have been applied: A expired at 50ms
		{"a forced release ends the offer early", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			force(0, chaos.OK, 0, 150, 160),
			owned("c/0", "C", "c", 3, 200, 210, ttl),
		}, true, ""},
		{"observations in order", []chaos.Op{
			observed(false, "", 0, nil, 0, 5),
			owned("a/0", "A", "a", 1, 10, 20, ttl),
			observed(true, "a", 1, nil, 30, 40),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			observed(false, "a", 2, b, 120, 130),
			observed(false, "", 2, nil, 700, 710),
			owned("c/0", "C", "c", 3, 800, 810, 200*ms),
			observed(true, "c", 3, nil, 820, 830),
			observed(false, "", 3, nil, 1100, 1110),
		}, true, ""},
		{"an observer sees an offer after it was taken", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			owned("b/0", "B", "b", 2, 120, 130, ttl),
			observed(false, "a", 2, b, 200, 210),
		}, false, "lease k: not linearizable"},
		{"an observer sees the key free while its holder certainly holds it", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			observed(false, "", 1, nil, 200, 210),
		}, false, "lease k: not linearizable"},
		{"an observer sees an offer lapse before its window", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			observed(false, "", 2, nil, 200, 210),
		}, false, "lease k: not linearizable"},
		{"an observer sees the wrong owner", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			observed(true, "z", 1, nil, 200, 210),
		}, false, "lease k: not linearizable"},
		{"an observer sees the preferred candidate that asked", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			preferredBy("b/0", "B", "b", 1, 20, 30),
			observedPreferred("a", 1, "b", 25, 40),
			handOff("a/0", "A", 1, []string{"b", "c"}, 500, chaos.OK, 2, 100, 110),
			owned("b/0", "B2", "b", 2, 120, 130, ttl),
		}, true, ""},
		{"an observer sees a preferred candidate that never asked", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			refused("b/0", "B", 1, 20, 30),
			observedPreferred("a", 1, "b", 40, 50),
		}, false, "no acquire of that owner had asked to be preferred"},
		{"a preferred candidate granted while the key is held", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			preferredBy("b/0", "B", "b", 1, 20, 30),
			owned("b/0", "B2", "b", 2, 100, 110, ttl),
		}, false, "lease k: not linearizable"},
		{"a candidate takes the offered token after a fault that lost data", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			lossy(20, 30),
			leaseOp(chaos.KindRenew, "a/1", "A", 1, chaos.OK, 40, 50, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			owned("b/0", "B", "b", 2, 200, 210, ttl),
		}, true, ""},
		{"a non-candidate granted during the window after a fault that lost data", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			lossy(20, 30),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			owned("c/0", "C", "c", 2, 200, 210, ttl),
		}, false, "lease k: not linearizable"},
		{"an observer reveals a grant whose acquire's outcome is unknown", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, 100*ms),
			leaseOp(chaos.KindAcquire, "c/0", "C", 0, chaos.Unknown, 150, 160, ttl),
			observed(true, "c", 2, nil, 200, 210),
			refused("d/0", "D", 2, 220, 230),
			observed(false, "", 2, nil, 1300, 1310),
			owned("d/0", "D2", "d", 3, 1400, 1410, ttl),
		}, true, ""},
		{"a revealed grant answered at last by a retry", []chaos.Op{
			observed(true, "c", 5, nil, 200, 210),
			owned("c/0", "C", "c", 5, 250, 300, ttl), // the retry, same nonce
			leaseOp(chaos.KindRenew, "c/1", "C", 5, chaos.OK, 400, 410, ttl),
		}, true, ""},
		{"an observer reveals the end of a grant it never saw held", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, 100*ms),
			observed(false, "", 4, nil, 300, 310),
			owned("d/0", "D", "d", 5, 400, 410, ttl),
		}, true, ""},
		{"an observer reveals a grant while the holder certainly holds", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			observed(true, "c", 2, nil, 200, 210),
		}, false, "lease k: not linearizable"},
		{"a revealed grant's token is not above the last one", []chaos.Op{
			owned("a/0", "A", "a", 3, 0, 10, 100*ms),
			observed(true, "c", 2, nil, 200, 210),
		}, false, "lease k: not linearizable"},
		{"a revealed grant to a non-candidate during a window", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			observed(true, "c", 3, nil, 200, 210),
		}, false, "lease k: not linearizable"},
		{"a revealed grant of the offered token to a candidate", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, ttl),
			handOff("a/0", "A", 1, b, 500, chaos.OK, 2, 100, 110),
			observed(true, "b", 2, nil, 200, 210),
			owned("c/0", "C", "c", 3, 1300, 1310, ttl),
		}, true, ""},
		{"the token of a revealed grant granted again", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, 100*ms),
			observed(true, "c", 2, nil, 200, 210),
			owned("d/0", "D", "d", 2, 1300, 1310, ttl),
		}, false, "lease k: not linearizable"},
		{"an observer sees the token go down", []chaos.Op{
			owned("a/0", "A", "a", 1, 0, 10, 50*ms),
			owned("c/0", "C", "c", 2, 100, 110, 50*ms),
			observed(false, "", 2, nil, 200, 210),
			observed(false, "", 1, nil, 300, 310),
		}, false, "saw the token go down"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := chaos.Check(c.ops, chaos.CheckOptions{Name: t.Name(), NoFiles: c.legal})
			if res.OK() != c.legal {
				t.Fatalf("legal = %v, want %v: %v", res.OK(), c.legal, res)
			}
			if !c.legal && !slices.ContainsFunc(res.Problems, func(p string) bool { return strings.Contains(p, c.want) }) {
				t.Errorf("no problem mentions %q: %v", c.want, res)
			}
		})
	}
}

// handOffCounts logs what a run's hand-offs and observers did, in the
// form docs/reliability.md quotes, and fails t unless handOffsSeen.
func handOffCounts(t *testing.T, ops []chaos.Op) {
	t.Helper()
	h, o := chaos.CountHandOffs(ops), chaos.CountObservations(ops)
	t.Logf("%v", h)
	t.Logf("%v", o)
	if h.OK == 0 || h.Taken == 0 {
		t.Errorf("no hand-off was taken by a candidate (is the backend a lease.HandOffer?): %v", h)
	}
	if o.States == 0 || o.Changes[lease.ChangeHandedOff.String()] == 0 {
		t.Errorf("the observers saw no hand-off: %v", o)
	}
}

// handOffsSeen reports whether the history shows what a hand-offs row is
// for: an offer taken by a candidate, and an observer that saw a
// hand-off.
func handOffsSeen(ops []chaos.Op) bool {
	return chaos.CountHandOffs(ops).Taken > 0 && chaos.CountObservations(ops).Changes[lease.ChangeHandedOff.String()] > 0
}

// maxRunOn bounds how long a run goes on past its planned end while what
// it must show has not happened yet (see runMemoryHandOffs and
// handOffsRow): generous, so that only a workload that no longer brings
// it about fails, not a slow machine.
const maxRunOn = time.Minute

// runMemoryHandOffs runs the goroutine harness on a memory backend with
// hand-offs and an observer on each key for d, and then on until done
// reports true of the history so far (failing t if it does not within
// maxRunOn), stops it, converges, stops the observers (failing t if an
// observer's last state is not the final one) and returns the history.
func runMemoryHandOffs(t *testing.T, b lease.Backend, d time.Duration, done func([]chaos.Op) bool) []chaos.Op {
	t.Helper()
	rec := chaos.NewRecorder(nil)
	h := chaos.NewHarness(rec, chaos.Options{
		Keys: []string{"k1", "k2"}, Policy: shortPolicy(t, 200*time.Millisecond), Clients: 4, Open: memoryOpen(b, &chaos.MemoryStore{}),
		HandOffs: true, Observers: 1,
	})
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.StopObservers(context.Background(), -1) }()
	time.Sleep(d)
	for start := time.Now(); !done(rec.Ops()); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > maxRunOn {
			t.Errorf("%v after the planned end, the run has still not shown what it is for: the workload no longer brings it about", maxRunOn)
			break
		}
	}
	if err := h.Stop(); err != nil {
		t.Error(err)
	}
	if err := h.Converge(ctxT(t), 5*time.Second); err != nil {
		t.Errorf("after the run, not every key could be had again: %v", err)
	}
	if err := h.StopObservers(ctxT(t), 5*time.Second); err != nil {
		t.Errorf("once quiet, an observer's last state is not the final state: %v", err)
	}
	return rec.Ops()
}

// TestHandOffs runs hand-offs and observers under the faults of the
// matrix of TestPermitsAndSets (see there), on the same backends, and on
// the memory backend with no fault. The goroutine clients end about half
// of the rounds on a lease they still hold with Handle.HandOff instead of
// Release: to the clients acquiring the same key at the time, or to the
// owner strings the others use next, or to an owner nobody uses (the
// offer lapses); the child never hands off, and is refused during the
// windows. An observer lane on each key ranges over Client.Observe.
//
// The checker's model ends the holder's acquisition at a hand-off, grants
// the offered token only to a candidate while the offer may stand, and
// anything else only after the window, above it; it refuses a renewal or
// release of the old holder after it; and it holds every state an
// observer reported to the key's history at some point during the read.
// Beside the model, an observer's tokens never go down (unless a fault
// lost data). Once the run is quiet, every observer's last state must be
// the key's final state. The row logs the hand-offs and what the
// observers saw, per Change.
func TestHandOffs(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		ops := runMemoryHandOffs(t, leasememory.New(leasememory.Options{}), 1500*time.Millisecond, handOffsSeen)
		res := chaos.Check(ops, chaos.CheckOptions{Name: t.Name()})
		t.Logf("chaos-summary %s: %v", t.Name(), res)
		if !res.OK() {
			t.Fatal(res)
		}
		handOffCounts(t, ops)
	})
	t.Run("valkey", func(t *testing.T) {
		t.Parallel()
		srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
		p := newProxy(t, srv.Addr())
		target := valkeyTarget(p.Addr())
		target.FenceAddr = testserver.Valkey(t).Addr()
		r := startRun(t, target, rowOptions{handOffs: true})
		handOffsRow(t, r, []fault{pauseHolder(r), blackhole(p), repliesLost(p), killValkey(srv, true)}, rowOptions{unknowns: true, deadlines: true, handOffs: true})
		r.withoutDataLoss()
	})
	t.Run("valkey-aof", func(t *testing.T) {
		t.Parallel()
		srv := testserver.StartValkey(t, testserver.ValkeyOptions{AppendOnly: true})
		r := startRun(t, valkeyTarget(srv.Addr()), rowOptions{handOffs: true})
		handOffsRow(t, r, []fault{pauseHolder(r), killValkey(srv, false)}, rowOptions{deadlines: true, handOffs: true})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		srv := testserver.StartPostgres(t)
		p := newProxy(t, srv.Addr())
		target := chaos.Target{Kind: "postgres", URL: onServer(t, migrate(t, srv.NewDatabase(t)), p.Addr())}
		r := startRun(t, target, rowOptions{handOffs: true})
		handOffsRow(t, r, []fault{pauseHolder(r), blackhole(p), repliesLost(p), crashPostgres(srv)}, rowOptions{unknowns: true, deadlines: true, handOffs: true})
	})
	t.Run("valkey-failover", func(t *testing.T) {
		t.Parallel()
		pair, target := startValkeyPair(t)
		r := startRun(t, target, rowOptions{handOffs: true})
		handOffsRow(t, r, []fault{{"failovers", pair.failOver}}, rowOptions{deadlines: true, handOffs: true})
		r.withoutDataLoss()
	})
	t.Run("postgres-failover", func(t *testing.T) {
		t.Parallel()
		postgresFailoverRow(t, rowOptions{deadlines: true, handOffs: true})
	})
}

// handOffsRow goes round faults as primitivesRow does, and on while the
// run has not shown an offer taken by a candidate and an observer that
// saw a hand-off (up to maxRunOn past the planned end: a short run with
// few rounds may, by chance, offer the key only to clients that were not
// acquiring it), then finishes r with o and logs the hand-offs and what
// the observers saw.
func handOffsRow(t *testing.T, r *run, faults []fault, o rowOptions) {
	injected := map[string]int{}
	for n := 0; n < len(faults) || r.running() || o.unknowns && r.runningForUnknowns() || r.runningForHandOffs(); n++ {
		r.pause(ttl/5, ttl/2)
		f := faults[n%len(faults)]
		f.inject(t, r)
		injected[f.name]++
	}
	r.finish(o)
	var done []string
	for _, f := range faults {
		done = append(done, fmt.Sprintf("%d %s", injected[f.name], f.name))
	}
	t.Logf("faults: %s", strings.Join(done, ", "))
}

// runningForHandOffs is running for a hand-offs row: while the history
// has not shown handOffsSeen it goes on up to maxRunOn past the planned
// end.
func (r *run) runningForHandOffs() bool {
	return r.running() || !handOffsSeen(r.rec.Ops()) && time.Now().Before(r.until.Add(maxRunOn))
}

// brokenHandOff wraps a backend whose hand-offs are broken on purpose:
// with keep, HandOff reports a hand-off with a new token but leaves the
// holder holding the key (two holders: the one that handed off, and the
// one after); otherwise an Acquire refused because of an offer to others
// ends the offer behind the history's back (a forced release it does not
// record) and is granted during the window.
//
// shown counts the answers that make the break visible in a history:
// with keep, an Acquire called after a kept hand-off returned and refused
// because the kept holder still holds the key (the model has ended that
// acquisition); otherwise a grant during the window that returned with
// more than half of the window's time left (the model cannot place it
// after the window).
type brokenHandOff struct {
	lease.Backend
	keep  bool
	shown atomic.Int64

	mu   sync.Mutex
	kept map[string]kept // by key, with keep
}

// kept is a hand-off the broken backend did not make: the token of the
// holder it left holding, and when it returned.
type kept struct {
	token lease.Token
	at    time.Time
}

func (b *brokenHandOff) HandOff(ctx context.Context, a lease.Acquisition, o lease.Offer) (lease.Token, error) {
	if b.keep {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.kept == nil {
			b.kept = map[string]kept{}
		}
		b.kept[a.Key] = kept{a.Token, time.Now()}
		return a.Token + 1, nil
	}
	return b.Backend.(lease.HandOffer).HandOff(ctx, a, o)
}

func (b *brokenHandOff) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	called := time.Now()
	tok, err := b.Backend.Acquire(ctx, r)
	var na *lease.NotAcquiredError
	if !errors.As(err, &na) {
		return tok, err
	}
	if b.keep {
		b.mu.Lock()
		k, ok := b.kept[r.Key]
		b.mu.Unlock()
		if ok && na.Token == k.token && called.After(k.at) {
			b.shown.Add(1)
		}
		return tok, err
	}
	if len(na.Candidates) == 0 {
		return tok, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.Backend.(lease.ForceReleaser).ForceRelease(ctx, r.Key, 0); err != nil {
		return 0, err
	}
	tok, err = b.Backend.Acquire(ctx, r)
	if err == nil && time.Since(called) < na.Remaining/2 {
		b.shown.Add(1)
	}
	return tok, err
}

func (b *brokenHandOff) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return b.Backend.(lease.ReleaseWatcher).WatchReleases(ctx, key)
}

func (b *brokenHandOff) WatchChanges(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return b.Backend.(lease.ChangeWatcher).WatchChanges(ctx, key)
}

// TestCheckerCatchesBrokenHandOff runs the hand-offs' workload, with
// observers, with hand-offs broken on purpose, and the checker must
// refuse the history: one that keeps the holder after it handed off, and
// one that grants a non-candidate during the window. Each run goes on
// until the break has shown in an answer (see brokenHandOff), up to
// maxRunOn. On the memory backend both; on Valkey, the goroutine clients
// of a row through the broken backend (the child's is sound), in the
// short form the second only, in the long form both.
func TestCheckerCatchesBrokenHandOff(t *testing.T) {
	t.Parallel()
	names := map[bool]string{true: "keeps the holder", false: "grants a non-candidate during the window"}
	for _, keep := range []bool{true, false} {
		name := names[keep]
		t.Run(name+"/memory", func(t *testing.T) {
			t.Parallel()
			b := &brokenHandOff{Backend: leasememory.New(leasememory.Options{}), keep: keep}
			ops := runMemoryHandOffs(t, b, time.Second, func([]chaos.Op) bool { return b.shown.Load() > 0 })
			res := chaos.Check(ops, chaos.CheckOptions{Name: t.Name(), NoFiles: true})
			if res.OK() {
				t.Fatalf("the checker accepted the history of a hand-off that %s (%d answers showed it): %v", name, b.shown.Load(), res)
			}
			t.Logf("refused, as it should be (%d answers showed the break): %s; the first: %s", b.shown.Load(), kinds(res.Problems), res.Problems[0])
		})
	}
	for _, keep := range []bool{false, true} {
		if keep && !long() {
			break // the short form shows one break on Valkey; the long form both
		}
		name := names[keep]
		t.Run(name+"/valkey", func(t *testing.T) {
			t.Parallel()
			var broken []*brokenHandOff
			var mu sync.Mutex
			shown := func() int64 {
				mu.Lock()
				defer mu.Unlock()
				var n int64
				for _, b := range broken {
					n += b.shown.Load()
				}
				return n
			}
			r := startRun(t, valkeyTarget(testserver.Valkey(t).Addr()), rowOptions{handOffs: true, wrap: func(b lease.Backend) lease.Backend {
				bh := &brokenHandOff{Backend: b, keep: keep}
				mu.Lock()
				defer mu.Unlock()
				broken = append(broken, bh)
				return bh
			}})
			for r.running() || shown() == 0 && time.Now().Before(r.until.Add(maxRunOn)) {
				time.Sleep(50 * time.Millisecond)
			}
			if shown() == 0 {
				t.Fatalf("%v after the planned end, no answer showed the broken hand-off: the workload no longer brings it about", maxRunOn)
			}
			if err := r.child.Stop(30 * time.Second); err != nil {
				t.Error(err)
			}
			r.childDone = true
			if err := r.h.Stop(); err != nil {
				t.Error(err)
			}
			res := chaos.Check(r.rec.Ops(), chaos.CheckOptions{Name: t.Name(), NoFiles: true, ModelOptions: chaos.ModelOptions{ClockTokens: true}})
			if res.OK() {
				t.Fatalf("a hand-off that %s went unnoticed (%d answers showed it): %v", name, shown(), res)
			}
			t.Logf("the checker refuses the history, as it should (%d answers showed the break): %s; the first: %s", shown(), kinds(res.Problems), res.Problems[0])
		})
	}
}
