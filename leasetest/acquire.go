package leasetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golib/lease/lease"
)

func acquireCases() []testCase {
	return []testCase{
		{"Acquire/Free", func(e *env) {
			key := e.key("k")
			a := e.acquire(key, "owner-a")
			r := e.inspect(key)
			if !r.Held || r.Owner != "owner-a" || r.Token != a.Token {
				e.t.Fatalf("Inspect = %+v, want held by owner-a with token %d", r, a.Token)
			}
			if r.Remaining <= 0 || r.Remaining > longTTL {
				e.t.Fatalf("Inspect remaining = %v, want in (0, %v]", r.Remaining, longTTL)
			}
		}},
		{"Acquire/HeldByOther", func(e *env) {
			key := e.key("k")
			a := e.acquire(key, "owner-a")
			for _, owner := range []string{"owner-b", "owner-a"} { // the same owner string is another acquisition too
				_, err := e.b.Acquire(e.ctx(), lease.AcquireRequest{Key: key, Owner: owner, Nonce: e.nonce(), TTL: longTTL})
				var na *lease.NotAcquiredError
				if !errors.As(err, &na) || !errors.Is(err, lease.ErrNotAcquired) {
					e.t.Fatalf("second Acquire by %s: got %v, want a *lease.NotAcquiredError", owner, err)
				}
				if na.Key != key || na.Holder != "owner-a" || na.Token != a.Token || na.Remaining <= 0 || na.Remaining > longTTL {
					e.t.Fatalf("NotAcquiredError = %+v, want key %q, holder owner-a, token %d, remaining in (0, %v]", na, key, a.Token, longTTL)
				}
			}
			e.mustHold(a)
		}},
		{"Acquire/IdempotentForOneNonce", func(e *env) {
			key := e.key("k")
			a := e.acquireShort(key, "owner-a")
			e.wait(e.s.TTL / 2)
			tok, err := e.b.Acquire(e.ctx(), lease.AcquireRequest{Key: key, Owner: a.Owner, Nonce: a.Nonce, TTL: e.s.TTL})
			if err != nil || tok != a.Token {
				e.t.Fatalf("repeated Acquire with the same nonce = %d, %v; want the same token %d", tok, err, a.Token)
			}
			if r := e.inspect(key); r.Remaining <= e.s.TTL/2 {
				e.t.Fatalf("repeated Acquire did not extend the lease: remaining %v of %v", r.Remaining, e.s.TTL)
			}
		}},
		{"Acquire/OneWinnerAmong50", func(e *env) {
			key := e.key("k")
			const n = 50
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				winners []*lease.Handle
				others  []error
			)
			start := make(chan struct{})
			for i := range n {
				c := e.client("contender-" + string(rune('A'+i%26)) + strings.Repeat("x", i/26))
				wg.Go(func() {
					<-start
					h, err := c.TryAcquire(e.ctx(), key, e.policy())
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
			if len(winners) != 1 {
				e.t.Fatalf("%d winners among %d contenders, want exactly 1", len(winners), n)
			}
			e.mustHold(lease.Acquisition{Key: key, Owner: winners[0].Owner(), Token: winners[0].Token()})
		}},
		{"Acquire/WaitsForRelease", func(e *env) {
			key := e.key("k")
			holder, err := e.client("holder").TryAcquire(e.ctx(), key, e.policy())
			if err != nil {
				e.t.Fatal(err)
			}
			p := e.policyWith(lease.PolicyOptions{Wait: 20 * time.Second, Retry: 20 * time.Millisecond})
			type result struct {
				h   *lease.Handle
				err error
			}
			done := make(chan result, 1)
			go func() {
				h, err := e.client("waiter").Acquire(e.ctx(), key, p)
				done <- result{h, err}
			}()
			settle(e, done, 3) // the waiter finds the lease held, at least once
			if err := holder.Release(e.ctx()); err != nil {
				e.t.Fatalf("Release: %v", err)
			}
			r := settle(e, done, -1)
			if r.err != nil {
				e.t.Fatalf("waiting Acquire: %v", r.err)
			}
			if r.h.Token() <= holder.Token() {
				e.t.Fatalf("waiter's token %d is not above the released holder's %d", r.h.Token(), holder.Token())
			}
		}},
		{"Acquire/GivesUpAfterWait", func(e *env) {
			key := e.key("k")
			a := e.acquire(key, "holder")
			p := e.policyWith(lease.PolicyOptions{Wait: 300 * time.Millisecond, Retry: 50 * time.Millisecond, MaxAttempts: 3})
			done := make(chan error, 1)
			go func() {
				_, err := e.client("waiter").Acquire(e.ctx(), key, p)
				done <- err
			}()
			err := settle(e, done, -1)
			var na *lease.NotAcquiredError
			if !errors.As(err, &na) || na.Holder != "holder" {
				e.t.Fatalf("Acquire of a held key = %v, want a *lease.NotAcquiredError naming the holder", err)
			}
			e.mustHold(a)
		}},
		{"Acquire/KeysAreOpaque", func(e *env) {
			base := e.key("")
			keys := []string{
				base + "a", base + "{a}", base + "a}:token", base + "{" + base + "a}", base + "with space",
				base + "ünïcödé ✓ 鍵", base + `quo'te"d`, base + "%s%d", base + "a\\b", base + ";DROP TABLE x;--",
			}
			long := base + strings.Repeat("L", lease.MaxKeyLen-len(base))
			keys = append(keys, long)
			got := map[string]lease.Acquisition{}
			for i, k := range keys {
				got[k] = e.acquire(k, "owner-"+string(rune('a'+i)))
			}
			for _, k := range keys {
				e.mustHold(got[k])
			}
			// Releasing one leaves every other untouched.
			if err := e.b.Release(e.ctx(), got[keys[0]]); err != nil {
				e.t.Fatalf("Release(%q): %v", keys[0], err)
			}
			e.mustBeFree(keys[0])
			for _, k := range keys[1:] {
				e.mustHold(got[k])
			}
		}},
		{"Acquire/InvalidKeysRejectedBeforeIO", func(e *env) {
			cb, calls := CountCalls(e.b)
			c := e.clientOn(cb, "owner", e.clock())
			for _, k := range []string{"", "nul\x00byte", "new\nline", "tab\tbed", "bad utf8 \xff", strings.Repeat("x", lease.MaxKeyLen+1)} {
				if _, err := c.Acquire(e.ctx(), k, e.policy()); !errors.Is(err, lease.ErrInvalidKey) {
					e.t.Errorf("Acquire(%q) = %v, want ErrInvalidKey", k, err)
				}
				if _, err := c.TryAcquire(e.ctx(), k, e.policy()); !errors.Is(err, lease.ErrInvalidKey) {
					e.t.Errorf("TryAcquire(%q) = %v, want ErrInvalidKey", k, err)
				}
				if _, err := c.Inspect(e.ctx(), k); !errors.Is(err, lease.ErrInvalidKey) {
					e.t.Errorf("Inspect(%q) = %v, want ErrInvalidKey", k, err)
				}
			}
			if n := calls.Total(); n != 0 {
				e.t.Fatalf("%d backend calls for invalid keys, want 0", n)
			}
		}},
		{"Acquire/CancelledContext", func(e *env) {
			key := e.key("k")
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if h, err := e.client("owner").Acquire(ctx, key, e.policy()); err == nil || !errors.Is(err, context.Canceled) {
				e.t.Fatalf("Acquire with a cancelled context = %v, %v; want context.Canceled", h, err)
			}
			e.mustBeFree(key)
			if tok, err := e.b.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: "owner", Nonce: e.nonce(), TTL: longTTL}); err == nil {
				e.t.Fatalf("backend Acquire with a cancelled context succeeded with token %d", tok)
			} else if !errors.Is(err, lease.ErrIndeterminate) {
				e.mustBeFree(key) // a definite failure must have changed nothing
			}
		}},
		{"Acquire/GrantAfterCancelIsGivenBack", func(e *env) {
			key := e.key("k")
			ctx, cancel := context.WithCancel(e.ctx())
			b := &cancelAfterGrant{Backend: e.b, cancel: cancel}
			h, err := e.clientOn(b, "owner", e.clock()).Acquire(ctx, key, e.policy())
			if err == nil || !errors.Is(err, context.Canceled) {
				e.t.Fatalf("Acquire whose grant arrived after cancellation = %v, %v; want context.Canceled", h, err)
			}
			if b.granted.Load() == 0 {
				e.t.Fatal("the backend granted nothing; the test proves nothing")
			}
			if errors.Is(err, lease.ErrIndeterminate) {
				e.t.Fatalf("Acquire = %v; the grant was answered and given back, so the outcome is known", err)
			}
			e.mustBeFree(key)
		}},
		{"Acquire/UnansweredAttemptIsResolvedByRetry", func(e *env) {
			key := e.key("k")
			b := &loseFirstReply{Backend: e.b}
			p := e.policyWith(lease.PolicyOptions{Wait: 10 * time.Second, Retry: 10 * time.Millisecond})
			done := make(chan error, 1)
			var h *lease.Handle
			go func() {
				var err error
				h, err = e.clientOn(b, "owner", e.clock()).Acquire(e.ctx(), key, p)
				done <- err
			}()
			if err := settle(e, done, -1); err != nil {
				e.t.Fatalf("Acquire after an unanswered attempt: %v", err)
			}
			if first := lease.Token(b.first.Load()); h.Token() != first {
				e.t.Fatalf("retry got token %d, want the token %d of the unanswered attempt", h.Token(), first)
			}
			e.mustHold(lease.Acquisition{Key: key, Owner: "owner", Token: h.Token()})
		}},
		{"Acquire/UnansweredLastAttemptIsReleasedButStaysUnknown", func(e *env) {
			key := e.key("k")
			b := &loseFirstReply{Backend: e.b}
			_, err := e.clientOn(b, "owner", e.clock()).TryAcquire(e.ctx(), key, e.policy())
			if err == nil {
				e.t.Fatal("TryAcquire whose only reply was lost succeeded")
			}
			if b.first.Load() == 0 {
				e.t.Fatal("the backend granted nothing; the test proves nothing")
			}
			// The clean-up release ended the grant, but no answer proves
			// that no copy of the attempt is still on its way.
			if !errors.Is(err, lease.ErrIndeterminate) {
				e.t.Fatalf("TryAcquire = %v, want ErrIndeterminate", err)
			}
			if !errors.Is(err, errReplyLost) {
				e.t.Fatalf("TryAcquire = %v, which lost the cause of the failed attempt from its chain", err)
			}
			if n := strings.Count(err.Error(), "outcome unknown"); n != 1 {
				e.t.Fatalf("TryAcquire = %q, which says \"outcome unknown\" %d times, want once", err, n)
			}
			e.mustBeFree(key)
		}},
		{"Acquire/AttemptAppliedAfterCleanupReleaseStaysUnknown", func(e *env) {
			// The attempt stalls in the backend (a PostgreSQL backend
			// stopped mid-statement, a request delayed on a dead
			// connection) and applies only after the clean-up release
			// found nothing held. An error that does not match
			// ErrIndeterminate would promise that no grant exists.
			key := e.key("k")
			b := &applyAfterRelease{Backend: e.b}
			_, err := e.clientOn(b, "owner", e.clock()).TryAcquire(e.ctx(), key, e.policy())
			if err == nil {
				e.t.Fatal("TryAcquire whose attempt was held back succeeded")
			}
			if b.late.Load() == 0 {
				e.t.Fatal("the held-back attempt was never applied; the test proves nothing")
			}
			if r := e.inspect(key); !r.Held || r.Owner != "owner" {
				e.t.Fatalf("Inspect = %+v, want held by the late attempt", r)
			}
			if !errors.Is(err, lease.ErrIndeterminate) {
				e.t.Fatalf("TryAcquire = %v: not ErrIndeterminate, yet the attempt was granted after it returned", err)
			}
			if !errors.Is(err, errReplyLost) {
				e.t.Fatalf("TryAcquire = %v, which lost the cause of the failed attempt from its chain", err)
			}
		}},
		{"Acquire/KnownOutcomeMeansNoGrant", func(e *env) {
			// Every way an Acquire can fail without an unanswered attempt
			// leaves the key as it was: an error that does not match
			// ErrIndeterminate means no grant exists for that call. When
			// ctx happens to end while an attempt is in flight (a loaded
			// machine makes that likely), the outcome is rightly unknown
			// and says nothing about this rule: such rounds are run again,
			// up to ten times, and at least one must end with a known
			// outcome.
			for round := range 10 {
				key := e.key(fmt.Sprint("k", round))
				holder := e.acquire(key, "holder")
				ctx, cancel := context.WithTimeout(e.ctx(), 200*time.Millisecond)
				done := make(chan error, 1)
				go func() {
					_, err := e.client("waiter").Acquire(ctx, key, e.policyWith(lease.PolicyOptions{Retry: 50 * time.Millisecond}))
					done <- err
				}()
				if e.s.Clock != nil {
					// The fake clock moves only when told: end the wait by
					// cancelling instead.
					settle(e, done, 5)
					cancel()
				}
				err := settle(e, done, -1)
				cancel()
				e.mustHold(holder)
				if errors.Is(err, lease.ErrIndeterminate) {
					e.t.Logf("round %d: ctx ended while an attempt was in flight: %v", round, err)
					continue
				}
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					e.t.Fatalf("Acquire of a held key until ctx ended = %v, want the context's error", err)
				}
				if errors.Is(err, lease.ErrNotAcquired) {
					e.t.Fatalf("Acquire = %v, want neither ErrIndeterminate nor ErrNotAcquired", err)
				}
				if !strings.Contains(err.Error(), `the last: held by "holder"`) {
					e.t.Fatalf("Acquire = %q, which does not say who held the key", err)
				}
				return
			}
			e.t.Fatal("ten rounds in a row ended with an attempt in flight")
		}},
	}
}

// settle waits for a value on done. With a fake clock it advances the
// clock in small steps meanwhile, so that sleeping clients make progress;
// with steps ≥ 0 it returns the zero value after that many steps instead
// of waiting for done.
func settle[T any](e *env, done <-chan T, steps int) T {
	e.t.Helper()
	var zero T
	deadline := time.After(20 * time.Second)
	for i := 0; steps < 0 || i < steps; i++ {
		if e.s.Clock != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			_ = e.s.Clock.WaitForTimers(ctx, 1)
			cancel()
			e.s.Clock.Advance(10 * time.Millisecond)
		}
		select {
		case v := <-done:
			return v
		case <-deadline:
			e.t.Fatal("timed out waiting for a result")
		case <-time.After(10 * time.Millisecond):
		}
	}
	return zero
}

// cancelAfterGrant cancels the caller's context right after the backend
// granted a lease, as if the caller gave up while the reply was in flight.
type cancelAfterGrant struct {
	lease.Backend
	cancel  context.CancelFunc
	granted atomic.Int64
}

func (b *cancelAfterGrant) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	tok, err := b.Backend.Acquire(ctx, r)
	if err == nil {
		b.granted.Add(1)
		b.cancel()
	}
	return tok, err
}

// loseFirstReply applies the first Acquire but reports it as unanswered.
var errReplyLost = errors.New("leasetest: reply lost")

type loseFirstReply struct {
	lease.Backend
	first atomic.Uint64
}

func (b *loseFirstReply) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	tok, err := b.Backend.Acquire(ctx, r)
	if err == nil && b.first.CompareAndSwap(0, uint64(tok)) {
		return 0, lease.Indeterminate(errReplyLost)
	}
	return tok, err
}

// applyAfterRelease holds back the first Acquire, reporting it as
// unanswered, and applies it right after the next Release by the same
// secret: the release finds nothing held, and the attempt is granted after
// it, as when an acquire statement stalls in the backend while the
// clean-up release runs on another connection.
type applyAfterRelease struct {
	lease.Backend
	mu      sync.Mutex
	pending *lease.AcquireRequest
	late    atomic.Uint64 // the token of the held-back attempt, once applied
}

func (b *applyAfterRelease) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	b.mu.Lock()
	if b.pending == nil && b.late.Load() == 0 {
		b.pending = &r
		b.mu.Unlock()
		return 0, lease.Indeterminate(errReplyLost)
	}
	b.mu.Unlock()
	return b.Backend.Acquire(ctx, r)
}

func (b *applyAfterRelease) Release(ctx context.Context, a lease.Acquisition) error {
	err := b.Backend.Release(ctx, a)
	b.mu.Lock()
	r := b.pending
	b.pending = nil
	b.mu.Unlock()
	if r != nil && r.Nonce == a.Nonce {
		if tok, aerr := b.Backend.Acquire(context.WithoutCancel(ctx), *r); aerr == nil {
			b.late.Store(uint64(tok))
		}
	}
	return err
}
