package leasetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// setCases check lease.SetAcquirer, directly and through
// Client.AcquireSet, on backends that implement it. The keys of a set
// share a hash tag, so that a Valkey cluster keeps them in one slot.
func setCases() []testCase {
	return []testCase{
		{"Set/AllOrNothing", func(e *env) {
			sa := e.setAcquirer()
			keys := e.setKeys(3)
			done := e.acquire(keys[0], "earlier")
			if err := e.b.Release(e.ctx(), done); err != nil {
				e.t.Fatal(err)
			}
			other := e.acquire(keys[1], "other")
			before := []lease.Record{e.inspect(keys[0]), e.inspect(keys[2])}
			nonce := e.nonce()
			_, err := sa.AcquireSet(e.ctx(), keys, lease.AcquireRequest{Owner: "set", Nonce: nonce, TTL: longTTL})
			var na *lease.NotAcquiredError
			if !errors.As(err, &na) || !errors.Is(err, lease.ErrNotAcquired) {
				e.t.Fatalf("AcquireSet with a key held elsewhere = %v, want a *lease.NotAcquiredError", err)
			}
			if na.Key != keys[1] || na.Holder != "other" || na.Token != other.Token {
				e.t.Fatalf("NotAcquiredError = %+v, want key %q held by other with token %d", na, keys[1], other.Token)
			}
			for i, k := range []string{keys[0], keys[2]} {
				if r := e.inspect(k); r.Held || r.Token != before[i].Token {
					e.t.Fatalf("Inspect(%q) after a refused AcquireSet = %+v, want it unchanged: %+v", k, r, before[i])
				}
			}
			e.mustHold(other)
			if err := e.b.Release(e.ctx(), other); err != nil {
				e.t.Fatal(err)
			}
			tok, err := sa.AcquireSet(e.ctx(), keys, lease.AcquireRequest{Owner: "set", Nonce: nonce, TTL: longTTL})
			if err != nil {
				e.t.Fatalf("AcquireSet once every key is free: %v", err)
			}
			for _, k := range keys {
				e.mustHold(lease.Acquisition{Key: k, Owner: "set", Token: tok})
			}
		}},
		{"Set/TokenAboveEveryKey", func(e *env) {
			sa := e.setAcquirer()
			keys := e.setKeys(3)
			// The last key gets far ahead of the others.
			var high lease.Token
			for range 20 {
				a := e.acquire(keys[2], "other")
				high = a.Token
				if err := e.b.Release(e.ctx(), a); err != nil {
					e.t.Fatal(err)
				}
			}
			low := e.acquire(keys[0], "other")
			if err := e.b.Release(e.ctx(), low); err != nil {
				e.t.Fatal(err)
			}
			set := e.acquireSet(sa, keys, "set")
			if set.Token <= high {
				e.t.Fatalf("the set's token %d is not above every token of its keys (up to %d)", set.Token, high)
			}
			if err := sa.ReleaseSet(e.ctx(), keys, set); err != nil {
				e.t.Fatalf("ReleaseSet: %v", err)
			}
			for _, k := range keys {
				if a := e.acquire(k, "after"); a.Token <= set.Token {
					e.t.Fatalf("Acquire(%q) after the set's release got token %d, not above the set's %d", k, a.Token, set.Token)
				}
			}
		}},
		{"Set/IdempotentForOneNonce", func(e *env) {
			sa := e.setAcquirer()
			keys := e.setKeys(2)
			r := lease.AcquireRequest{Owner: "set", Nonce: e.nonce(), TTL: e.s.TTL}
			tok, err := sa.AcquireSet(e.ctx(), keys, r)
			if err != nil {
				e.t.Fatal(err)
			}
			e.wait(e.s.TTL / 2)
			tok2, err := sa.AcquireSet(e.ctx(), keys, r)
			if err != nil || tok2 != tok {
				e.t.Fatalf("repeated AcquireSet with the same nonce = %d, %v; want the same token %d", tok2, err, tok)
			}
			for _, k := range keys {
				if rec := e.inspect(k); rec.Remaining <= e.s.TTL/2 || rec.Token != tok {
					e.t.Fatalf("Inspect(%q) after the repeated AcquireSet = %+v: not extended", k, rec)
				}
			}
		}},
		{"Set/RenewAndRelease", func(e *env) {
			sa := e.setAcquirer()
			keys := e.setKeys(3)
			set := e.acquireSetTTL(sa, keys, "set", e.s.TTL)
			e.wait(e.s.TTL / 2)
			if err := sa.RenewSet(e.ctx(), keys, set, e.s.TTL); err != nil {
				e.t.Fatalf("RenewSet: %v", err)
			}
			for _, k := range keys {
				if rec := e.inspect(k); rec.Remaining <= e.s.TTL/2 || !rec.Held || rec.Token != set.Token {
					e.t.Fatalf("Inspect(%q) after RenewSet = %+v: not extended", k, rec)
				}
			}
			if err := sa.ReleaseSet(e.ctx(), keys, set); err != nil {
				e.t.Fatalf("ReleaseSet: %v", err)
			}
			for _, k := range keys {
				if rec := e.inspect(k); rec.Held || rec.Token != set.Token {
					e.t.Fatalf("Inspect(%q) after ReleaseSet = %+v, want free with token %d kept", k, rec, set.Token)
				}
			}
			e.mustLose("RenewSet after ReleaseSet", sa.RenewSet(e.ctx(), keys, set, e.s.TTL), lease.Expired)
			e.mustLose("ReleaseSet after ReleaseSet", sa.ReleaseSet(e.ctx(), keys, set), lease.Expired)
		}},
		{"Set/PartialLoss", func(e *env) {
			sa := e.setAcquirer()
			keys := e.setKeys(3)
			set := e.acquireSet(sa, keys, "set")
			want := lease.Expired
			if f, ok := e.b.(lease.ForceReleaser); ok {
				if _, err := f.ForceRelease(e.ctx(), keys[1], 0); err != nil {
					e.t.Fatalf("ForceRelease(%q): %v", keys[1], err)
				}
				want = lease.ForceReleased
			} else {
				one := set
				one.Key = keys[1]
				if err := e.b.Release(e.ctx(), one); err != nil {
					e.t.Fatalf("Release of one key of the set: %v", err)
				}
			}
			err := sa.RenewSet(e.ctx(), keys, set, longTTL)
			e.mustLose("RenewSet with one key lost", err, want)
			var lost *lease.LostError
			if errors.As(err, &lost); lost.Key != keys[1] {
				e.t.Fatalf("RenewSet's *LostError names %q, want the lost key %q", lost.Key, keys[1])
			}
			for _, k := range []string{keys[0], keys[2]} {
				e.mustHold(lease.Acquisition{Key: k, Owner: "set", Token: set.Token})
			}
			err = sa.ReleaseSet(e.ctx(), keys, set)
			e.mustLose("ReleaseSet with one key lost", err, want)
			if errors.As(err, &lost); lost.Key != keys[1] {
				e.t.Fatalf("ReleaseSet's *LostError names %q, want the lost key %q", lost.Key, keys[1])
			}
			for _, k := range keys {
				e.mustBeFree(k)
			}
		}},
		{"Set/ForgedReleaseRefused", func(e *env) {
			sa := e.setAcquirer()
			keys := e.setKeys(2)
			set := e.acquireSet(sa, keys, "set")
			forged := set
			forged.Nonce = e.nonce()
			e.mustLose("ReleaseSet with a forged secret", sa.ReleaseSet(e.ctx(), keys, forged), lease.Superseded)
			e.mustLose("RenewSet with a forged secret", sa.RenewSet(e.ctx(), keys, forged, longTTL), lease.Superseded)
			wrongToken := set
			wrongToken.Token++
			if err := sa.ReleaseSet(e.ctx(), keys, wrongToken); !errors.Is(err, lease.ErrLost) {
				e.t.Fatalf("ReleaseSet with the right secret and another token = %v, want ErrLost", err)
			}
			for _, k := range keys {
				e.mustHold(lease.Acquisition{Key: k, Owner: "set", Token: set.Token})
			}
			// A stale holder of one key cannot release the set.
			if err := sa.ReleaseSet(e.ctx(), keys, set); err != nil {
				e.t.Fatal(err)
			}
			next := e.acquireSet(sa, keys, "next")
			e.mustLose("a stale holder's ReleaseSet", sa.ReleaseSet(e.ctx(), keys, set), lease.Superseded)
			for _, k := range keys {
				e.mustHold(lease.Acquisition{Key: k, Owner: "next", Token: next.Token})
			}
		}},
		{"Set/OverlappingSetsNeverDeadlock", func(e *env) {
			e.setAcquirer()
			pool := e.setKeys(5)
			const workers, rounds = 8, 12
			p := e.policyWith(lease.PolicyOptions{Wait: 20 * time.Second, Retry: 10 * time.Millisecond})
			var (
				inUse sync.Map // key → the worker holding it, as the workers see it
				wg    sync.WaitGroup
				left  atomic.Int64
			)
			left.Store(workers)
			stop := e.tick()
			defer stop()
			for w := range workers {
				c := e.client(fmt.Sprint("worker-", w))
				rng := rand.New(rand.NewPCG(uint64(w), 26))
				wg.Go(func() {
					defer left.Add(-1)
					for range rounds {
						n := 1 + rng.IntN(3)
						perm := rng.Perm(len(pool))[:n]
						keys := make([]string, n)
						for i, j := range perm {
							keys[i] = pool[j] // in no particular order
						}
						h, err := c.AcquireSet(e.ctx(), keys, p)
						if err != nil {
							e.t.Errorf("worker %d: AcquireSet(%q): %v", w, keys, err)
							return
						}
						for _, k := range keys {
							if prev, loaded := inUse.LoadOrStore(k, w); loaded {
								e.t.Errorf("worker %d holds %q, which worker %v holds too", w, k, prev)
							}
						}
						for _, k := range keys {
							inUse.Delete(k)
						}
						if err := h.Release(e.ctx()); err != nil {
							e.t.Errorf("worker %d: Release: %v", w, err)
							return
						}
					}
				})
			}
			finished := make(chan struct{})
			go func() { wg.Wait(); close(finished) }()
			select {
			case <-finished:
			case <-time.After(25 * time.Second):
				e.t.Fatalf("%d of %d workers still wait for overlapping sets after 25s: a deadlock", left.Load(), workers)
			}
		}},
		{"Set/WaiterWokenByRelease", func(e *env) {
			e.setAcquirer()
			keys := e.setKeys(3)
			holder, err := e.client("holder").TryAcquire(e.ctx(), keys[2], e.policy())
			if err != nil {
				e.t.Fatal(err)
			}
			p, quick := e.waiterPolicy()
			type result struct {
				h   *lease.Handle
				err error
			}
			done := make(chan result, 1)
			go func() {
				h, err := e.client("waiter").AcquireSet(e.ctx(), keys, p)
				done <- result{h, err}
			}()
			settle(e, done, 3) // the waiter finds the last key held
			start := time.Now()
			if err := holder.Release(e.ctx()); err != nil {
				e.t.Fatal(err)
			}
			r := settle(e, done, -1)
			if r.err != nil {
				e.t.Fatalf("waiting AcquireSet: %v", r.err)
			}
			if waited := time.Since(start); waited > quick {
				e.t.Fatalf("the waiter got its set %v after the release, want within %v: it was not woken by the release", waited, quick)
			}
			if r.h.Token() <= holder.Token() {
				e.t.Fatalf("the waiter's token %d is not above the released holder's %d", r.h.Token(), holder.Token())
			}
		}},
		{"Set/IdleWaiterIsQuiet", func(e *env) {
			e.setAcquirer()
			keys := e.setKeys(3)
			e.acquire(keys[1], "holder")
			e.quietWaiter(func(ctx context.Context, c *lease.Client, p lease.Policy) error {
				_, err := c.AcquireSet(ctx, keys, p)
				return err
			})
		}},
		{"Set/History", func(e *env) {
			// Each key of a set keeps its history as a lease's record does.
			sa := e.setAcquirer()
			keys := e.setKeys(2)
			step := func() { e.wait(20 * time.Millisecond) }
			if err := e.b.Release(e.ctx(), e.acquire(keys[0], "before")); err != nil {
				e.t.Fatal(err)
			}
			before := e.clock().Now()
			set := e.acquireSet(sa, keys, "set")
			var acquired [2]lease.Record
			for i, k := range keys {
				acquired[i] = e.inspect(k)
				e.checkAcquiredAround(acquired[i], before)
				if !acquired[i].RenewedAt.Equal(acquired[i].AcquiredAt) {
					e.t.Fatalf("after AcquireSet Inspect(%q) = %+v; want RenewedAt = AcquiredAt", k, acquired[i])
				}
			}
			if acquired[0].Transitions != 1 || acquired[1].Transitions != 0 {
				e.t.Fatalf("after AcquireSet the keys have %d and %d transitions, want 1 (a holder before) and 0 (a new record)",
					acquired[0].Transitions, acquired[1].Transitions)
			}
			step()
			if err := sa.RenewSet(e.ctx(), keys, set, longTTL); err != nil {
				e.t.Fatal(err)
			}
			for i, k := range keys {
				r := e.inspect(k)
				if !r.AcquiredAt.Equal(acquired[i].AcquiredAt) || !r.RenewedAt.After(acquired[i].AcquiredAt) || r.Transitions != acquired[i].Transitions {
					e.t.Fatalf("after RenewSet Inspect(%q) = %+v; want AcquiredAt %v kept, RenewedAt after it, transitions unchanged", k, r, acquired[i].AcquiredAt)
				}
			}
		}},
		{"Set/Handle", func(e *env) {
			e.setAcquirer()
			keys := e.setKeys(3)
			c := e.client("owner")
			h, err := c.TryAcquireSet(e.ctx(), []string{keys[2], keys[0], keys[1], keys[0]}, e.policy())
			if err != nil {
				e.t.Fatal(err)
			}
			if !slices.Equal(h.Keys(), keys) || h.Key() != strings.Join(keys, ",") {
				e.t.Fatalf("Keys() = %q, Key() = %q; want the keys sorted once, %q", h.Keys(), h.Key(), keys)
			}
			if _, _, ok := h.Permit(); ok {
				e.t.Fatal("Permit() reports a permit for a set")
			}
			if s := h.Snapshot(); s.Valid() {
				e.t.Fatalf("Snapshot() of a set = %+v, which is valid; want an invalid one (use SnapshotFor)", s)
			}
			if err := fence.ValidateSnapshot(h.Snapshot()); !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "SnapshotFor") {
				e.t.Fatalf("fence.ValidateSnapshot(Snapshot() of a set) = %v, want fence.ErrInvalid pointing at SnapshotFor", err)
			}
			for _, k := range keys {
				s, err := h.SnapshotFor(k)
				if err != nil || s.Key != k || s.Token != h.Token() || !s.Valid() {
					e.t.Fatalf("SnapshotFor(%q) = %+v, %v; want key %q and token %d", k, s, err, k, h.Token())
				}
			}
			if _, err := h.SnapshotFor(h.Key()); !errors.Is(err, lease.ErrInvalidKey) {
				e.t.Fatalf("SnapshotFor(Key()) of a set = %v, want ErrInvalidKey", err)
			}
			e.holdThenRelease(h)
			for _, k := range keys {
				e.mustBeFree(k)
			}
			err = h.Validate(e.ctx())
			var lost *lease.LostError
			if !errors.As(err, &lost) || lost.Key != keys[0] || !strings.Contains(err.Error(), fmt.Sprintf("key %q", keys[0])) {
				e.t.Fatalf("Validate after Release = %v, want a *lease.LostError naming the first key, %q", err, keys[0])
			}
		}},
		{"Set/LostKeyNamed", func(e *env) {
			e.setAcquirer()
			f := e.forceReleaser()
			keys := e.setKeys(2)
			h, err := e.client("owner").TryAcquireSet(e.ctx(), keys, e.policy())
			if err != nil {
				e.t.Fatal(err)
			}
			one := lease.Acquisition{Key: keys[1], Owner: "owner", Token: h.Token()}
			if _, err := f.ForceRelease(e.ctx(), keys[1], 0); err != nil {
				e.t.Fatal(err)
			}
			err = h.Renew(e.ctx())
			var lost *lease.LostError
			if !errors.As(err, &lost) || lost.Key != one.Key {
				e.t.Fatalf("Renew of a set with a key force-released = %v, want a *lease.LostError for %q", err, one.Key)
			}
			if want := fmt.Sprintf("lease: renew %q: key %q: token %d lost: force-released", h.Key(), one.Key, h.Token()); err.Error() != want {
				e.t.Fatalf("Renew = %q, want %q", err, want)
			}
			if _, err := h.StartManaged(e.ctx()); !errors.Is(err, lease.ErrLost) {
				e.t.Fatalf("StartManaged after the loss = %v, want ErrLost", err)
			}
			if err := h.Release(e.ctx()); !errors.Is(err, lease.ErrLost) {
				e.t.Fatalf("Release of the partly lost set = %v, want ErrLost", err)
			}
			e.mustBeFree(keys[0])
		}},
		{"Set/UnansweredLastAttemptIsReleasedButStaysUnknown", func(e *env) {
			sa := e.setAcquirer()
			keys := e.setKeys(2)
			b := &setReplyLost{Backend: e.b, sa: sa}
			_, err := e.clientOn(b, "owner", e.clock()).TryAcquireSet(e.ctx(), keys, e.policy())
			if b.token.Load() == 0 {
				e.t.Fatal("the backend granted nothing; the test proves nothing")
			}
			if !errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, errReplyLost) {
				e.t.Fatalf("TryAcquireSet whose reply was lost = %v, want ErrIndeterminate with the cause", err)
			}
			for _, k := range keys {
				e.mustBeFree(k)
			}
		}},
		{"Set/UnansweredAttemptIsResolvedByRetry", func(e *env) {
			sa := e.setAcquirer()
			keys := e.setKeys(2)
			b := &setReplyLost{Backend: e.b, sa: sa}
			p := e.policyWith(lease.PolicyOptions{Wait: 10 * time.Second, Retry: 10 * time.Millisecond})
			done := make(chan error, 1)
			var h *lease.Handle
			go func() {
				var err error
				h, err = e.clientOn(b, "owner", e.clock()).AcquireSet(e.ctx(), keys, p)
				done <- err
			}()
			if err := settle(e, done, -1); err != nil {
				e.t.Fatalf("AcquireSet after an unanswered attempt: %v", err)
			}
			if first := lease.Token(b.token.Load()); h.Token() != first {
				e.t.Fatalf("the retry got token %d, want the unanswered attempt's %d", h.Token(), first)
			}
		}},
		{"Set/FencesTakeEachKey", func(e *env) {
			sa := e.setAcquirer()
			keys := e.setKeys(2)
			c := e.client("mover")
			h, err := c.TryAcquireSet(e.ctx(), keys, e.policy())
			if err != nil {
				e.t.Fatal(err)
			}
			var f fence.Memory
			for _, k := range keys {
				s, err := h.SnapshotFor(k)
				if err != nil {
					e.t.Fatal(err)
				}
				if err := f.Do(s, []string{"account:" + k}, nil); err != nil {
					e.t.Fatalf("the set's write under %q: %v", k, err)
				}
			}
			if err := h.Release(e.ctx()); err != nil {
				e.t.Fatal(err)
			}
			// A newer holder of one key writes; the old set's write under
			// that key is refused.
			next := e.acquire(keys[1], "next")
			if err := f.Do(lease.Snapshot{Key: next.Key, Owner: next.Owner, Token: next.Token}, []string{"account:" + keys[1]}, nil); err != nil {
				e.t.Fatalf("the newer holder's write: %v", err)
			}
			old, _ := h.SnapshotFor(keys[1])
			if err := f.Do(old, []string{"account:" + keys[1]}, nil); !errors.Is(err, fence.ErrStale) {
				e.t.Fatalf("the old set's write after a newer holder's = %v, want fence.ErrStale", err)
			}
			// A newer set over both keys supersedes the old one under each.
			if err := e.b.Release(e.ctx(), next); err != nil {
				e.t.Fatal(err)
			}
			newer := e.acquireSet(sa, keys, "mover")
			if newer.Token <= next.Token {
				e.t.Fatalf("the newer set's token %d is not above %d", newer.Token, next.Token)
			}
		}},
		{"Set/InvalidArgumentsRefusedBeforeIO", func(e *env) {
			e.setAcquirer()
			c := e.client("owner")
			tooMany := make([]string, lease.MaxSetKeys+1)
			base := e.key("")
			for i := range tooMany {
				tooMany[i] = fmt.Sprint(base, "{t}", i)
			}
			for name, keys := range map[string][]string{
				"no key":          nil,
				"an invalid key":  {base + "{t}a", "bad\nkey"},
				"too many keys":   tooMany,
				"an empty string": {""},
			} {
				if _, err := c.TryAcquireSet(e.ctx(), keys, e.policy()); !errors.Is(err, lease.ErrInvalidKey) {
					e.t.Fatalf("TryAcquireSet with %s = %v, want ErrInvalidKey", name, err)
				}
			}
			if r := e.inspect(tooMany[0]); r.Token != 0 {
				e.t.Fatalf("Inspect(%q) after refused calls = %+v, want no record", tooMany[0], r)
			}
		}},
		{"Sweeper/SetTokenRisesAfterRecordLoss", func(e *env) {
			s := e.sweeper()
			sa := e.setAcquirer()
			keys := e.setKeys(2)
			// The second key gets the highest token; its record ends, the
			// first key's stays (held): a new set still gets a higher token.
			e.acquireTTL(keys[0], "stays", max(longTTL, 4*e.s.Retention))
			var high lease.Token
			for range 3 {
				a := e.acquire(keys[1], "leaves")
				high = a.Token
				if err := e.b.Release(e.ctx(), a); err != nil {
					e.t.Fatal(err)
				}
			}
			e.wait(e.s.Retention + e.slack())
			e.sweepAll(s, false)
			if r := e.inspect(keys[1]); r.Token != 0 {
				e.t.Fatalf("Inspect(%q) a retention after release and a sweep = %+v, want no record", keys[1], r)
			}
			third := e.setKeys(1)[0]
			set := e.acquireSet(sa, []string{keys[1], third}, "set")
			if set.Token <= high {
				e.t.Fatalf("after %q's record ended, a set with it got token %d, not above its last, %d", keys[1], set.Token, high)
			}
		}},
	}
}

// setAcquirer returns the backend as a lease.SetAcquirer, or skips.
func (e *env) setAcquirer() lease.SetAcquirer {
	e.t.Helper()
	sa, ok := e.b.(lease.SetAcquirer)
	if !ok {
		e.t.Skip("the backend does not implement lease.SetAcquirer")
	}
	return sa
}

// setKeys returns n keys unique to this subtest, sorted, that share one
// hash tag, "{…}", so that a Valkey cluster stores them in one slot. The
// keys of every call in one subtest share it.
func (e *env) setKeys(n int) []string {
	if e.tag == "" {
		e.tag = e.key("") + "{" + e.nonce()[:8] + "}/"
	}
	keys := make([]string, n)
	for i := range keys {
		e.tagged++
		keys[i] = fmt.Sprintf("%s%03d", e.tag, e.tagged)
	}
	return keys
}

// acquireSet acquires keys directly on the backend with a long TTL.
func (e *env) acquireSet(sa lease.SetAcquirer, keys []string, owner string) lease.Acquisition {
	e.t.Helper()
	return e.acquireSetTTL(sa, keys, owner, longTTL)
}

func (e *env) acquireSetTTL(sa lease.SetAcquirer, keys []string, owner string, ttl time.Duration) lease.Acquisition {
	e.t.Helper()
	nonce := e.nonce()
	tok, err := sa.AcquireSet(e.ctx(), keys, lease.AcquireRequest{Owner: owner, Nonce: nonce, TTL: ttl})
	if err != nil {
		e.t.Fatalf("AcquireSet(%q): %v", keys, err)
	}
	if tok == 0 {
		e.t.Fatalf("AcquireSet(%q) granted token 0", keys)
	}
	return lease.Acquisition{Key: strings.Join(keys, ","), Owner: owner, Nonce: nonce, Token: tok}
}

// tick advances the fake clock, if there is one, by a millisecond every
// millisecond, until the returned function is called: for subtests whose
// clients wait on many timers at once.
func (e *env) tick() func() {
	if e.s.Clock == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				e.s.Clock.Advance(time.Millisecond)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// setReplyLost is a backend whose first AcquireSet is applied but
// reported as unanswered.
type setReplyLost struct {
	lease.Backend
	sa    lease.SetAcquirer
	token atomic.Uint64
}

func (b *setReplyLost) AcquireSet(ctx context.Context, keys []string, r lease.AcquireRequest) (lease.Token, error) {
	tok, err := b.sa.AcquireSet(ctx, keys, r)
	if err == nil && b.token.CompareAndSwap(0, uint64(tok)) {
		return 0, lease.Indeterminate(errReplyLost)
	}
	return tok, err
}

func (b *setReplyLost) RenewSet(ctx context.Context, keys []string, a lease.Acquisition, ttl time.Duration) error {
	return b.sa.RenewSet(ctx, keys, a, ttl)
}

func (b *setReplyLost) ReleaseSet(ctx context.Context, keys []string, a lease.Acquisition) error {
	return b.sa.ReleaseSet(ctx, keys, a)
}
