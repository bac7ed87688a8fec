package leasetest

import (
	"errors"

	"github.com/golib/lease/lease"
)

func releaseCases() []testCase {
	return []testCase{
		{"Release/FreesKeyAndKeepsToken", func(e *env) {
			key := e.key("k")
			a := e.acquire(key, "owner")
			if err := e.b.Release(e.ctx(), a); err != nil {
				e.t.Fatalf("Release: %v", err)
			}
			r := e.inspect(key)
			if r.Held || r.Token != 0 && r.Token != a.Token {
				e.t.Fatalf("after Release, Inspect = %+v; want free, with token 0 or %d", r, a.Token)
			}
			b := e.acquire(key, "next")
			if b.Token <= a.Token {
				e.t.Fatalf("token after release %d, want above %d", b.Token, a.Token)
			}
		}},
		{"Release/Twice", func(e *env) {
			key := e.key("k")
			a := e.acquire(key, "owner")
			if err := e.b.Release(e.ctx(), a); err != nil {
				e.t.Fatalf("Release: %v", err)
			}
			e.mustLose("second Release", e.b.Release(e.ctx(), a), lease.Expired)
			h, err := e.client("owner").TryAcquire(e.ctx(), key, e.policy())
			if err != nil {
				e.t.Fatal(err)
			}
			if err := h.Release(e.ctx()); err != nil {
				e.t.Fatalf("Handle.Release: %v", err)
			}
			err = h.Release(e.ctx())
			if !errors.Is(err, lease.ErrLost) || !errors.Is(err, lease.ErrReleased) {
				e.t.Fatalf("second Handle.Release = %v, want ErrLost and ErrReleased", err)
			}
		}},
		{"Release/AfterExpiry", func(e *env) {
			key := e.key("k")
			a := e.acquireShort(key, "owner")
			e.expire(e.s.TTL)
			e.mustLose("Release after expiry", e.b.Release(e.ctx(), a), lease.Expired)
			b := e.acquire(key, "other")
			e.mustLose("Release after expiry and takeover", e.b.Release(e.ctx(), a), lease.Superseded)
			e.mustHold(b)
		}},
		{"Release/ByNonceAlone", func(e *env) {
			key := e.key("k")
			a := e.acquire(key, "owner")
			byNonce := a
			byNonce.Token = 0
			if err := e.b.Release(e.ctx(), byNonce); err != nil {
				e.t.Fatalf("Release by key and secret: %v", err)
			}
			e.mustBeFree(key)
		}},
		{"Release/WrongToken", func(e *env) {
			key := e.key("k")
			a := e.acquire(key, "owner")
			wrong := a
			wrong.Token = a.Token + 1
			if err := e.b.Release(e.ctx(), wrong); !errors.Is(err, lease.ErrLost) {
				e.t.Fatalf("Release with the wrong token = %v, want ErrLost", err)
			}
			e.mustHold(a)
		}},
		{"Release/CancelledContext", func(e *env) {
			key := e.key("k")
			a := e.acquire(key, "owner")
			ctx, cancel := contextCancelled()
			defer cancel()
			err := e.b.Release(ctx, a)
			if err == nil {
				e.t.Fatal("Release with a cancelled context reported success")
			}
			if !errors.Is(err, lease.ErrIndeterminate) {
				e.mustHold(a) // a definite failure must have changed nothing
			}
			if err := e.b.Renew(ctx, a, longTTL); err == nil {
				e.t.Fatal("Renew with a cancelled context reported success")
			}
		}},
	}
}
