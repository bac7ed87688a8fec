package leasetest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/golib/lease/lease"
)

func tokenCases() []testCase {
	return []testCase{
		{"Tokens/IncreaseOver1000Cycles", func(e *env) {
			key := e.key("k")
			var last lease.Token
			for i := range 1000 {
				a := e.acquire(key, "owner")
				if a.Token <= last {
					e.t.Fatalf("cycle %d: token %d is not above the previous %d", i, a.Token, last)
				}
				last = a.Token
				if err := e.b.Release(e.ctx(), a); err != nil {
					e.t.Fatalf("cycle %d: Release: %v", i, err)
				}
			}
		}},
		{"Tokens/IncreaseAcrossExpiry", func(e *env) {
			key := e.key("k")
			a := e.acquireShort(key, "owner")
			e.expire(e.s.TTL)
			b := e.acquireShort(key, "owner")
			if b.Token <= a.Token {
				e.t.Fatalf("token after expiry %d, want above %d", b.Token, a.Token)
			}
		}},
		{"Tokens/UniqueUnderConcurrency", func(e *env) {
			key := e.key("k")
			const workers, rounds = 8, 40
			var (
				mu      sync.Mutex
				seen    = map[lease.Token]bool{}
				granted int
				wg      sync.WaitGroup
				errs    = make(chan error, workers)
			)
			for range workers {
				wg.Go(func() {
					var last lease.Token
					for range rounds {
						nonce := e.nonce()
						tok, err := e.b.Acquire(e.ctx(), lease.AcquireRequest{Key: key, Owner: "w", Nonce: nonce, TTL: longTTL})
						if errors.Is(err, lease.ErrNotAcquired) {
							continue
						}
						if err != nil {
							errs <- err
							return
						}
						if tok <= last {
							errs <- fmt.Errorf("a worker got token %d after %d", tok, last)
							return
						}
						last = tok
						mu.Lock()
						dup := seen[tok]
						seen[tok] = true
						granted++
						mu.Unlock()
						if dup {
							errs <- fmt.Errorf("token %d was granted twice", tok)
							return
						}
						if err := e.b.Release(e.ctx(), lease.Acquisition{Key: key, Owner: "w", Nonce: nonce, Token: tok}); err != nil {
							errs <- fmt.Errorf("Release of token %d: %w", tok, err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				e.t.Fatal(err)
			}
			if granted == 0 {
				e.t.Fatal("no acquisition succeeded; the test proves nothing")
			}
		}},
		{"Tokens/KeysAreIndependent", func(e *env) {
			k1, k2 := e.key("one"), e.key("two")
			a := e.acquire(k1, "owner")
			b := e.acquire(k2, "owner")
			if err := e.b.Release(e.ctx(), a); err != nil {
				e.t.Fatal(err)
			}
			e.mustHold(b)
			e.mustBeFree(k1)
			if err := e.b.Renew(e.ctx(), lease.Acquisition{Key: k2, Owner: a.Owner, Nonce: a.Nonce, Token: a.Token}, longTTL); !errors.Is(err, lease.ErrLost) {
				e.t.Fatalf("Renew of key two with key one's acquisition = %v, want ErrLost", err)
			}
			e.mustHold(b)
		}},
	}
}

func contextCancelled() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx, cancel
}
