package leasetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// semaphoreCases check lease.PermitAcquirer, directly and through
// Client.AcquirePermit, on backends that implement it.
func semaphoreCases() []testCase {
	return []testCase{
		{"Semaphore/LowestFreeSlotsThenRefused", func(e *env) {
			pa := e.permitAcquirer()
			sem := e.key("sem")
			var last lease.Token
			ttls := []time.Duration{longTTL, longTTL / 2, longTTL}
			for i, ttl := range ttls {
				slot, a := e.acquirePermitTTL(pa, sem, fmt.Sprint("holder-", i), 3, ttl)
				if slot != i {
					e.t.Fatalf("permit %d went to slot %d, want the lowest free slot, %d", i, slot, i)
				}
				if a.Token <= last {
					e.t.Fatalf("permit %d has token %d, not above the previous permit's %d", i, a.Token, last)
				}
				last = a.Token
				e.mustHold(a) // an ordinary lease on the permit key
			}
			_, _, err := pa.AcquirePermit(e.ctx(), lease.AcquireRequest{Key: sem, Owner: "late", Nonce: e.nonce(), TTL: longTTL}, 3)
			var na *lease.NotAcquiredError
			if !errors.As(err, &na) || !errors.Is(err, lease.ErrNotAcquired) {
				e.t.Fatalf("AcquirePermit with every permit held = %v, want a *lease.NotAcquiredError", err)
			}
			if na.Key != sem || na.Holder != "holder-1" || na.Remaining <= 0 || na.Remaining > longTTL/2 {
				e.t.Fatalf("NotAcquiredError = %+v, want key %q and the holder whose permit ends first, holder-1, with at most %v left", na, sem, longTTL/2)
			}
		}},
		{"Semaphore/AtMostNAmongMany", func(e *env) {
			e.permitAcquirer()
			sem := e.key("sem")
			const n, contenders = 4, 30
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				winners []*lease.Handle
				others  []error
			)
			start := make(chan struct{})
			for i := range contenders {
				c := e.client(fmt.Sprint("contender-", i))
				wg.Go(func() {
					<-start
					h, err := c.TryAcquirePermit(e.ctx(), sem, n, e.policy())
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						winners = append(winners, h)
					case !errors.Is(err, lease.ErrNotAcquired):
						others = append(others, err)
					}
				})
			}
			close(start)
			wg.Wait()
			if len(others) > 0 {
				e.t.Fatalf("%d contenders failed with errors other than ErrNotAcquired, first: %v", len(others), others[0])
			}
			if len(winners) != n {
				e.t.Fatalf("%d winners among %d contenders for %d permits, want exactly %d", len(winners), contenders, n, n)
			}
			var slots []int
			for _, h := range winners {
				s, slot, ok := h.Permit()
				if !ok || s != sem || h.Key() != lease.PermitKey(sem, slot) {
					e.t.Fatalf("a winner's Permit() = %q, %d, %v with Key() %q; want semaphore %q and its permit key", s, slot, ok, h.Key(), sem)
				}
				slots = append(slots, slot)
				e.mustHold(lease.Acquisition{Key: h.Key(), Owner: h.Owner(), Token: h.Token()})
			}
			slices.Sort(slots)
			if !slices.Equal(slots, []int{0, 1, 2, 3}) {
				e.t.Fatalf("winners hold slots %v, want 0 to 3, each once", slots)
			}
		}},
		{"Semaphore/SlotsReusedAfterReleaseAndExpiry", func(e *env) {
			pa := e.permitAcquirer()
			sem := e.key("sem")
			_, a := e.acquirePermitTTL(pa, sem, "crashes", 2, e.s.TTL)
			_, b := e.acquirePermitTTL(pa, sem, "releases", 2, longTTL)
			if err := e.b.Release(e.ctx(), b); err != nil {
				e.t.Fatalf("Release of permit 1: %v", err)
			}
			slot, c := e.acquirePermitTTL(pa, sem, "next", 2, longTTL)
			if slot != 1 || c.Token <= b.Token {
				e.t.Fatalf("after permit 1 was released: slot %d, token %d; want slot 1 with a token above %d", slot, c.Token, b.Token)
			}
			e.expire(e.s.TTL)
			slot, d := e.acquirePermitTTL(pa, sem, "after-expiry", 2, longTTL)
			if slot != 0 || d.Token <= c.Token {
				e.t.Fatalf("after permit 0 expired: slot %d, token %d; want slot 0 with a token above %d", slot, d.Token, c.Token)
			}
			e.mustLose("Renew of the expired permit after its slot was taken", e.b.Renew(e.ctx(), a, longTTL), lease.Superseded)
			e.mustHold(d)
		}},
		{"Semaphore/TokensRiseAcrossTheSemaphore", func(e *env) {
			pa := e.permitAcquirer()
			sem := e.key("sem")
			// Slot 7's key, outside the permits asked for below, gets far
			// ahead: a permit of any slot must still get a higher token.
			var high lease.Token
			for range 20 {
				a := e.acquire(lease.PermitKey(sem, 7), "other")
				high = a.Token
				if err := e.b.Release(e.ctx(), a); err != nil {
					e.t.Fatal(err)
				}
			}
			last := high
			held := map[int]lease.Acquisition{}
			for i := range 12 {
				slot, a := e.acquirePermitTTL(pa, sem, "cycler", 3, longTTL)
				if a.Token <= last {
					e.t.Fatalf("cycle %d: permit at slot %d got token %d, not above every earlier token of the semaphore (%d)", i, slot, a.Token, last)
				}
				last = a.Token
				held[slot] = a
				if len(held) == 3 { // release one, another slot each time
					victim := (i / 3) % 3
					if err := e.b.Release(e.ctx(), held[victim]); err != nil {
						e.t.Fatalf("cycle %d: Release: %v", i, err)
					}
					delete(held, victim)
				}
			}
		}},
		{"Semaphore/LoweringN", func(e *env) {
			pa := e.permitAcquirer()
			sem := e.key("sem")
			var held [3]lease.Acquisition
			for i := range held {
				_, held[i] = e.acquirePermitTTL(pa, sem, fmt.Sprint("holder-", i), 3, longTTL)
			}
			refused := func(what string, permits int) {
				e.t.Helper()
				_, _, err := pa.AcquirePermit(e.ctx(), lease.AcquireRequest{Key: sem, Owner: "late", Nonce: e.nonce(), TTL: longTTL}, permits)
				if !errors.Is(err, lease.ErrNotAcquired) {
					e.t.Fatalf("%s: AcquirePermit with %d permits = %v, want ErrNotAcquired", what, permits, err)
				}
			}
			refused("three permits held", 2)
			// The permit above the new number stays valid.
			if err := e.b.Renew(e.ctx(), held[2], longTTL); err != nil {
				e.t.Fatalf("Renew of the permit at slot 2 once the semaphore asks for 2: %v", err)
			}
			// A slot below the new number frees up: granted, and three hold,
			// never more than the old number.
			if err := e.b.Release(e.ctx(), held[0]); err != nil {
				e.t.Fatal(err)
			}
			slot, a := e.acquirePermitTTL(pa, sem, "new-0", 2, longTTL)
			if slot != 0 {
				e.t.Fatalf("with 2 permits and slot 0 free, got slot %d", slot)
			}
			refused("slots 0 and 1 held", 2)
			// The permit above drains: the semaphore holds two.
			if err := e.b.Release(e.ctx(), held[2]); err != nil {
				e.t.Fatal(err)
			}
			refused("slots 0 and 1 held, slot 2 free", 2)
			if err := e.b.Release(e.ctx(), held[1]); err != nil {
				e.t.Fatal(err)
			}
			if slot, _ := e.acquirePermitTTL(pa, sem, "new-1", 2, longTTL); slot != 1 {
				e.t.Fatalf("with 2 permits and slot 1 free, got slot %d", slot)
			}
			// Raising the number again opens slot 2.
			if slot, _ := e.acquirePermitTTL(pa, sem, "new-2", 3, longTTL); slot != 2 {
				e.t.Fatalf("with 3 permits and slot 2 free, got slot %d", slot)
			}
			e.mustHold(a)
		}},
		{"Semaphore/IdempotentForOneNonce", func(e *env) {
			pa := e.permitAcquirer()
			sem := e.key("sem")
			e.acquirePermitTTL(pa, sem, "other", 2, longTTL)
			r := lease.AcquireRequest{Key: sem, Owner: "owner", Nonce: e.nonce(), TTL: e.s.TTL}
			slot, tok, err := pa.AcquirePermit(e.ctx(), r, 2)
			if err != nil || slot != 1 {
				e.t.Fatalf("AcquirePermit = %d, %d, %v; want slot 1", slot, tok, err)
			}
			e.wait(e.s.TTL / 2)
			slot2, tok2, err := pa.AcquirePermit(e.ctx(), r, 2)
			if err != nil || slot2 != slot || tok2 != tok {
				e.t.Fatalf("repeated AcquirePermit with the same nonce = slot %d, token %d, %v; want slot %d, token %d", slot2, tok2, err, slot, tok)
			}
			if rec := e.inspect(lease.PermitKey(sem, slot)); rec.Remaining <= e.s.TTL/2 {
				e.t.Fatalf("repeated AcquirePermit did not extend the permit: remaining %v of %v", rec.Remaining, e.s.TTL)
			}
		}},
		{"Semaphore/ForgedAndStaleReleaseRefused", func(e *env) {
			pa := e.permitAcquirer()
			sem := e.key("sem")
			_, a := e.acquirePermitTTL(pa, sem, "holder", 1, longTTL)
			forged := a
			forged.Nonce = e.nonce()
			e.mustLose("Release with a forged secret", e.b.Release(e.ctx(), forged), lease.Superseded)
			wrongToken := a
			wrongToken.Token++
			if err := e.b.Release(e.ctx(), wrongToken); !errors.Is(err, lease.ErrLost) {
				e.t.Fatalf("Release with the right secret and another token = %v, want ErrLost", err)
			}
			e.mustHold(a)
			if err := e.b.Release(e.ctx(), a); err != nil {
				e.t.Fatal(err)
			}
			_, b := e.acquirePermitTTL(pa, sem, "next", 1, longTTL)
			e.mustLose("a stale holder's second Release", e.b.Release(e.ctx(), a), lease.Superseded)
			e.mustLose("a stale holder's Renew", e.b.Renew(e.ctx(), a, longTTL), lease.Superseded)
			e.mustHold(b)
		}},
		{"Semaphore/WaiterWokenByRelease", func(e *env) {
			e.permitAcquirer()
			sem := e.key("sem")
			var holders []*lease.Handle
			for i := range 2 {
				h, err := e.client(fmt.Sprint("holder-", i)).TryAcquirePermit(e.ctx(), sem, 2, e.policy())
				if err != nil {
					e.t.Fatal(err)
				}
				holders = append(holders, h)
			}
			p, quick := e.waiterPolicy()
			type result struct {
				h   *lease.Handle
				err error
			}
			done := make(chan result, 1)
			go func() {
				h, err := e.client("waiter").AcquirePermit(e.ctx(), sem, 2, p)
				done <- result{h, err}
			}()
			settle(e, done, 3) // the waiter finds every permit held
			start := time.Now()
			if err := holders[1].Release(e.ctx()); err != nil {
				e.t.Fatal(err)
			}
			r := settle(e, done, -1)
			if r.err != nil {
				e.t.Fatalf("waiting AcquirePermit: %v", r.err)
			}
			if waited := time.Since(start); waited > quick {
				e.t.Fatalf("the waiter got its permit %v after the release, want within %v: it was not woken by the release", waited, quick)
			}
			if _, slot, _ := r.h.Permit(); slot != 1 || r.h.Token() <= holders[1].Token() {
				e.t.Fatalf("the waiter got slot %d with token %d, want slot 1 with a token above %d", slot, r.h.Token(), holders[1].Token())
			}
		}},
		{"Semaphore/IdleWaiterIsQuiet", func(e *env) {
			pa := e.permitAcquirer()
			sem := e.key("sem")
			for i := range 2 {
				e.acquirePermitTTL(pa, sem, fmt.Sprint("holder-", i), 2, longTTL)
			}
			e.quietWaiter(func(ctx context.Context, c *lease.Client, p lease.Policy) error {
				_, err := c.AcquirePermit(ctx, sem, 2, p)
				return err
			})
		}},
		{"Semaphore/History", func(e *env) {
			// A permit's record keeps its history as a lease's does.
			pa := e.permitAcquirer()
			sem := e.key("sem")
			step := func() { e.wait(20 * time.Millisecond) }
			before := e.clock().Now()
			r := lease.AcquireRequest{Key: sem, Owner: "first", Nonce: e.nonce(), TTL: longTTL}
			slot, tok, err := pa.AcquirePermit(e.ctx(), r, 2)
			if err != nil {
				e.t.Fatal(err)
			}
			key := lease.PermitKey(sem, slot)
			first := e.inspect(key)
			e.checkAcquiredAround(first, before)
			if !first.RenewedAt.Equal(first.AcquiredAt) || first.Transitions != 0 {
				e.t.Fatalf("after the first grant Inspect(%q) = %+v; want RenewedAt = AcquiredAt and 0 transitions", key, first)
			}
			step()
			if _, _, err := pa.AcquirePermit(e.ctx(), r, 2); err != nil {
				e.t.Fatal(err)
			}
			again := e.inspect(key)
			if !again.AcquiredAt.Equal(first.AcquiredAt) || !again.RenewedAt.After(first.AcquiredAt) || again.Transitions != 0 {
				e.t.Fatalf("after AcquirePermit retried with the holder's nonce Inspect(%q) = %+v; want AcquiredAt %v kept, RenewedAt after it, 0 transitions",
					key, again, first.AcquiredAt)
			}
			if err := e.b.Release(e.ctx(), lease.Acquisition{Key: key, Owner: "first", Nonce: r.Nonce, Token: tok}); err != nil {
				e.t.Fatal(err)
			}
			step()
			if s, _ := e.acquirePermitTTL(pa, sem, "second", 2, longTTL); s != slot {
				e.t.Fatalf("the next permit went to slot %d, want the released %d", s, slot)
			}
			if next := e.inspect(key); next.Transitions != 1 || !next.AcquiredAt.After(first.AcquiredAt) || !next.RenewedAt.Equal(next.AcquiredAt) {
				e.t.Fatalf("after a new holder's grant Inspect(%q) = %+v; want 1 transition, AcquiredAt after %v, RenewedAt = AcquiredAt", key, next, first.AcquiredAt)
			}
		}},
		{"Semaphore/Handle", func(e *env) {
			e.permitAcquirer()
			sem := e.key("sem")
			c := e.client("owner")
			h, err := c.TryAcquirePermit(e.ctx(), sem, 3, e.policy())
			if err != nil {
				e.t.Fatal(err)
			}
			if s, slot, ok := h.Permit(); s != sem || slot != 0 || !ok {
				e.t.Fatalf("Permit() = %q, %d, %v; want %q, 0, true", s, slot, ok, sem)
			}
			pk := lease.PermitKey(sem, 0)
			if h.Key() != pk || !slices.Equal(h.Keys(), []string{pk}) || h.Snapshot().Key != pk {
				e.t.Fatalf("Key() = %q, Keys() = %q, Snapshot().Key = %q; want the permit key %q", h.Key(), h.Keys(), h.Snapshot().Key, pk)
			}
			for _, k := range []string{pk, sem} {
				s, err := h.SnapshotFor(k)
				if err != nil || s.Key != k || s.Token != h.Token() || s.Owner != "owner" {
					e.t.Fatalf("SnapshotFor(%q) = %+v, %v; want key %q and token %d", k, s, err, k, h.Token())
				}
			}
			if _, err := h.SnapshotFor(lease.PermitKey(sem, 1)); !errors.Is(err, lease.ErrInvalidKey) {
				e.t.Fatalf("SnapshotFor(another permit's key) = %v, want ErrInvalidKey", err)
			}
			e.holdThenRelease(h)
			e.mustBeFree(pk)
			if err := h.Validate(e.ctx()); !errors.Is(err, lease.ErrLost) {
				e.t.Fatalf("Validate after Release = %v, want ErrLost", err)
			}
		}},
		{"Semaphore/UnansweredAttemptIsResolvedByRetry", func(e *env) {
			pa := e.permitAcquirer()
			sem := e.key("sem")
			e.acquirePermitTTL(pa, sem, "other", 3, longTTL)
			b := &permitReplyLost{Backend: e.b, pa: pa}
			p := e.policyWith(lease.PolicyOptions{Wait: 10 * time.Second, Retry: 10 * time.Millisecond})
			done := make(chan error, 1)
			var h *lease.Handle
			go func() {
				var err error
				h, err = e.clientOn(b, "owner", e.clock()).AcquirePermit(e.ctx(), sem, 3, p)
				done <- err
			}()
			if err := settle(e, done, -1); err != nil {
				e.t.Fatalf("AcquirePermit after an unanswered attempt: %v", err)
			}
			if _, slot, _ := h.Permit(); slot != b.slot || h.Token() != b.token {
				e.t.Fatalf("the retry got slot %d, token %d; want the unanswered attempt's slot %d, token %d", slot, h.Token(), b.slot, b.token)
			}
			e.mustBeFree(lease.PermitKey(sem, 2)) // no second permit
		}},
		{"Semaphore/UnansweredLastAttemptIsReleasedButStaysUnknown", func(e *env) {
			pa := e.permitAcquirer()
			sem := e.key("sem")
			e.acquirePermitTTL(pa, sem, "other", 3, longTTL)
			b := &permitReplyLost{Backend: e.b, pa: pa}
			_, err := e.clientOn(b, "owner", e.clock()).TryAcquirePermit(e.ctx(), sem, 3, e.policy())
			if b.token == 0 {
				e.t.Fatal("the backend granted nothing; the test proves nothing")
			}
			if !errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, errReplyLost) {
				e.t.Fatalf("TryAcquirePermit whose reply was lost = %v, want ErrIndeterminate with the cause", err)
			}
			e.mustBeFree(lease.PermitKey(sem, b.slot))
		}},
		{"Semaphore/FencedPerSlotAndPerSemaphore", func(e *env) {
			pa := e.permitAcquirer()
			sem := e.key("sem")
			c := e.client("worker")
			first, err := c.TryAcquirePermit(e.ctx(), sem, 2, e.policy())
			if err != nil {
				e.t.Fatal(err)
			}
			second, err := c.TryAcquirePermit(e.ctx(), sem, 2, e.policy())
			if err != nil {
				e.t.Fatal(err)
			}
			var f fence.Memory
			// Per semaphore: a resource any permit holder works on belongs
			// to the newest permit that wrote it.
			snapFor := func(h *lease.Handle) lease.Snapshot {
				s, err := h.SnapshotFor(sem)
				if err != nil {
					e.t.Fatal(err)
				}
				return s
			}
			if err := f.Do(snapFor(first), []string{"shared"}, nil); err != nil {
				e.t.Fatalf("the first permit's write: %v", err)
			}
			if err := f.Do(snapFor(second), []string{"shared"}, nil); err != nil {
				e.t.Fatalf("the newer permit's write: %v", err)
			}
			if err := f.Do(snapFor(first), []string{"shared"}, nil); !errors.Is(err, fence.ErrStale) {
				e.t.Fatalf("the older permit's write after the newer one's = %v, want fence.ErrStale", err)
			}
			// Per slot: slot 0's resource refuses slot 0's superseded holder.
			if err := f.Do(first.Snapshot(), []string{"slot-0"}, nil); err != nil {
				e.t.Fatalf("slot 0's write: %v", err)
			}
			if err := first.Release(e.ctx()); err != nil {
				e.t.Fatal(err)
			}
			_, next := e.acquirePermitTTL(pa, sem, "next", 2, longTTL)
			if next.Key != first.Key() {
				e.t.Fatalf("the next permit went to %q, want the released %q", next.Key, first.Key())
			}
			if err := f.Do(lease.Snapshot{Key: next.Key, Owner: next.Owner, Token: next.Token}, []string{"slot-0"}, nil); err != nil {
				e.t.Fatalf("slot 0's new holder's write: %v", err)
			}
			if err := f.Do(first.Snapshot(), []string{"slot-0"}, nil); !errors.Is(err, fence.ErrStale) {
				e.t.Fatalf("slot 0's superseded holder's write = %v, want fence.ErrStale", err)
			}
		}},
		{"Semaphore/InvalidArgumentsRefusedBeforeIO", func(e *env) {
			e.permitAcquirer()
			sem := e.key("sem")
			c := e.client("owner")
			for _, n := range []int{0, -1, lease.MaxPermits + 1} {
				if h, err := c.TryAcquirePermit(e.ctx(), sem, n, e.policy()); err == nil || errors.Is(err, lease.ErrNotAcquired) {
					e.t.Fatalf("TryAcquirePermit with %d permits = %v, %v; want it refused", n, h, err)
				}
			}
			if _, err := c.TryAcquirePermit(e.ctx(), "bad\nkey", 2, e.policy()); !errors.Is(err, lease.ErrInvalidKey) {
				e.t.Fatalf("TryAcquirePermit of an invalid key = %v, want ErrInvalidKey", err)
			}
			if r := e.inspect(lease.PermitKey(sem, 0)); r.Token != 0 {
				e.t.Fatalf("Inspect(permit 0) = %+v after refused calls, want no record", r)
			}
		}},
		{"Sweeper/PermitTokensRiseAfterRecordLoss", func(e *env) {
			s := e.sweeper()
			pa := e.permitAcquirer()
			sem := e.key("sem")
			// Slot 0 is held throughout; slot 1 gets the highest token, is
			// released, and its record ends: the next permit of slot 1
			// still gets a token above it.
			e.acquirePermitTTL(pa, sem, "stays", 2, max(longTTL, 4*e.s.Retention))
			_, b := e.acquirePermitTTL(pa, sem, "leaves", 2, longTTL)
			if err := e.b.Release(e.ctx(), b); err != nil {
				e.t.Fatal(err)
			}
			e.wait(e.s.Retention + e.slack())
			e.sweepAll(s, false)
			if r := e.inspect(b.Key); r.Token != 0 {
				e.t.Fatalf("Inspect(%q) a retention after release and a sweep = %+v, want no record", b.Key, r)
			}
			slot, c := e.acquirePermitTTL(pa, sem, "next", 2, longTTL)
			if slot != 1 || c.Token <= b.Token {
				e.t.Fatalf("after slot 1's record ended: slot %d, token %d; want slot 1 with a token above %d", slot, c.Token, b.Token)
			}
		}},
	}
}

// permitAcquirer returns the backend as a lease.PermitAcquirer, or skips.
func (e *env) permitAcquirer() lease.PermitAcquirer {
	e.t.Helper()
	pa, ok := e.b.(lease.PermitAcquirer)
	if !ok {
		e.t.Skip("the backend does not implement lease.PermitAcquirer")
	}
	return pa
}

// acquirePermitTTL acquires a permit of sem among permits directly on the
// backend.
func (e *env) acquirePermitTTL(pa lease.PermitAcquirer, sem, owner string, permits int, ttl time.Duration) (int, lease.Acquisition) {
	e.t.Helper()
	nonce := e.nonce()
	slot, tok, err := pa.AcquirePermit(e.ctx(), lease.AcquireRequest{Key: sem, Owner: owner, Nonce: nonce, TTL: ttl}, permits)
	if err != nil {
		e.t.Fatalf("AcquirePermit(%q, %d): %v", sem, permits, err)
	}
	if tok == 0 || slot < 0 || slot >= permits {
		e.t.Fatalf("AcquirePermit(%q, %d) granted slot %d with token %d", sem, permits, slot, tok)
	}
	return slot, lease.Acquisition{Key: lease.PermitKey(sem, slot), Owner: owner, Nonce: nonce, Token: tok}
}

// waiterPolicy returns the policy of a waiter that a release must wake,
// and how soon after the release it must have its grant: on a backend
// with release notifications, a Retry far longer than that, so that only
// the notification can wake it in time; otherwise (it polls) a short one.
func (e *env) waiterPolicy() (lease.Policy, time.Duration) {
	if _, ok := e.b.(lease.ReleaseWatcher); ok {
		return e.policyWith(lease.PolicyOptions{Wait: 25 * time.Second, Retry: 8 * time.Second}), 5 * time.Second
	}
	return e.policyWith(lease.PolicyOptions{Wait: 25 * time.Second, Retry: 20 * time.Millisecond}), 5 * time.Second
}

// permitReplyLost is a backend whose first AcquirePermit is applied but
// reported as unanswered.
type permitReplyLost struct {
	lease.Backend
	pa    lease.PermitAcquirer
	once  atomic.Bool
	slot  int
	token lease.Token
}

func (b *permitReplyLost) AcquirePermit(ctx context.Context, r lease.AcquireRequest, permits int) (int, lease.Token, error) {
	slot, tok, err := b.pa.AcquirePermit(ctx, r, permits)
	if err == nil && b.once.CompareAndSwap(false, true) {
		b.slot, b.token = slot, tok
		return 0, 0, lease.Indeterminate(errReplyLost)
	}
	return slot, tok, err
}

// quietWaiter checks that a waiter on a backend with release
// notifications asks the backend about once while its holders keep their
// leases (here for 30s), rather than every Retry: acquire runs the
// waiting call on a client of a backend that counts its acquire attempts.
func (e *env) quietWaiter(acquire func(context.Context, *lease.Client, lease.Policy) error) {
	e.t.Helper()
	w, ok := e.b.(lease.ReleaseWatcher)
	if !ok {
		e.t.Skip("the backend does not implement lease.ReleaseWatcher: its waiters poll every Retry")
	}
	b := &countingGroups{Backend: e.b, w: w}
	b.pa, _ = e.b.(lease.PermitAcquirer)
	b.sa, _ = e.b.(lease.SetAcquirer)
	p := e.policyWith(lease.PolicyOptions{Retry: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- acquire(ctx, e.clientOn(b, "waiter", e.clock()), p) }()
	// 25 Retry periods: a polling waiter would ask about 25 times. One
	// attempt finds the keys held, and a watch may wake it once more as
	// it starts.
	if e.s.Clock != nil {
		settle(e, done, 50) // 10ms steps
	} else {
		time.Sleep(500 * time.Millisecond)
	}
	n, watches := b.attempts.Load(), b.watches.Load()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		e.t.Fatalf("the waiter's call = %v, want it cancelled", err)
	}
	if watches == 0 {
		e.t.Fatal("the waiter set up no release watch")
	}
	// Each watch may wake the waiter up to twice as it is set up (see
	// lease.ReleaseWatcher; PostgreSQL wakes it when its LISTEN is in
	// place and when the key is marked, and on a loaded machine the marks
	// of a set's or a semaphore's keys may come one by one), so the bound
	// is one attempt plus two per watch: well below the 25 of a poller.
	if limit := 1 + 2*min(watches, 5); n > limit || n == 0 {
		e.t.Fatalf("a waiter made %d acquire attempts over 25 Retry periods of 20ms with every key held for 30s and %d watches, want 1 to %d: it polls instead of waiting for a release", n, watches, limit)
	}
}

// countingGroups counts the AcquirePermit and AcquireSet calls and the
// release watches made through it. It implements every capability that
// the quiet-waiter subtests need, whether the backend does or not: they
// call only those it has.
type countingGroups struct {
	lease.Backend
	w                 lease.ReleaseWatcher
	pa                lease.PermitAcquirer
	sa                lease.SetAcquirer
	attempts, watches atomic.Int64
}

func (b *countingGroups) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	b.watches.Add(1)
	return b.w.WatchReleases(ctx, key)
}

func (b *countingGroups) AcquirePermit(ctx context.Context, r lease.AcquireRequest, permits int) (int, lease.Token, error) {
	b.attempts.Add(1)
	return b.pa.AcquirePermit(ctx, r, permits)
}

func (b *countingGroups) AcquireSet(ctx context.Context, keys []string, r lease.AcquireRequest) (lease.Token, error) {
	b.attempts.Add(1)
	return b.sa.AcquireSet(ctx, keys, r)
}

func (b *countingGroups) RenewSet(ctx context.Context, keys []string, a lease.Acquisition, ttl time.Duration) error {
	return b.sa.RenewSet(ctx, keys, a, ttl)
}

func (b *countingGroups) ReleaseSet(ctx context.Context, keys []string, a lease.Acquisition) error {
	return b.sa.ReleaseSet(ctx, keys, a)
}
