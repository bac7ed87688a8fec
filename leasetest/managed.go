package leasetest

import (
	"context"
	"errors"
	"time"

	"github.com/golib/lease/lease"
)

// seedShape is the core shape of the API as users paste it, kept
// token for token (TestSeedShapeIsVerbatim checks it against the text
// users are given).
func seedShape(ctx context.Context, client *lease.Client, key string, policy lease.Policy, protectedWrite func(context.Context, lease.Token) error) error {
	// seed:begin
	handle, err := client.Acquire(ctx, key, policy)
	if err != nil {
		return err
	}
	managed, err := handle.StartManaged(ctx)
	if err != nil {
		return err
	}
	defer managed.Stop(context.WithoutCancel(ctx))
	defer handle.Release(context.WithoutCancel(ctx))
	if err := protectedWrite(ctx, handle.Token()); err != nil {
		return err
	}
	// seed:end
	return nil
}

func managedCases() []testCase {
	return []testCase{
		{"Managed/SeedShape", func(e *env) {
			key := e.key("k")
			client := e.client("seed")
			var wrote lease.Token
			write := func(ctx context.Context, token lease.Token) error {
				// The write runs while the lease is held by this token.
				e.mustHold(lease.Acquisition{Key: key, Owner: "seed", Token: token})
				wrote = token
				return nil
			}
			if err := seedShape(e.ctx(), client, key, e.policy(), write); err != nil {
				e.t.Fatalf("seed shape: %v", err)
			}
			if wrote == 0 {
				e.t.Fatal("the protected write never ran")
			}
			e.mustBeFree(key) // the deferred Release ran
			// A second run gets the key again, with a higher token.
			first := wrote
			if err := seedShape(e.ctx(), client, key, e.policy(), write); err != nil {
				e.t.Fatalf("seed shape, second run: %v", err)
			}
			if wrote <= first {
				e.t.Fatalf("second run wrote with token %d, want above %d", wrote, first)
			}
			// A failed write is returned, and the lease is still released.
			boom := errors.New("write refused")
			if err := seedShape(e.ctx(), client, key, e.policy(), func(context.Context, lease.Token) error { return boom }); !errors.Is(err, boom) {
				e.t.Fatalf("seed shape with a failing write = %v, want %v", err, boom)
			}
			e.mustBeFree(key)
		}},
		{"Managed/StartManagedRefuses", func(e *env) {
			p := e.policyWith(lease.PolicyOptions{TTL: e.s.TTL, OperationTimeout: e.s.TTL / 4, RenewEvery: e.s.TTL / 10})
			acquire := func(key string) *lease.Handle {
				e.t.Helper()
				h, err := e.client("owner").TryAcquire(e.ctx(), key, p)
				if err != nil {
					e.t.Fatal(err)
				}
				return h
			}

			// Already managed.
			h := acquire(e.key("managed"))
			m, err := h.StartManaged(e.ctx())
			if err != nil {
				e.t.Fatalf("StartManaged: %v", err)
			}
			if m2, err := h.StartManaged(e.ctx()); !errors.Is(err, lease.ErrAlreadyManaged) || m2 != nil {
				e.t.Fatalf("second StartManaged = %v, %v; want nil, ErrAlreadyManaged", m2, err)
			}
			if err := m.Stop(e.ctx()); err != nil {
				e.t.Fatalf("Stop: %v", err)
			}
			if _, err := h.StartManaged(e.ctx()); !errors.Is(err, lease.ErrAlreadyManaged) {
				e.t.Fatalf("StartManaged after Stop = %v, want ErrAlreadyManaged", err)
			}
			if err := h.Release(e.ctx()); err != nil {
				e.t.Fatalf("Release: %v", err)
			}

			// Released.
			h = acquire(e.key("released"))
			if err := h.Release(e.ctx()); err != nil {
				e.t.Fatalf("Release: %v", err)
			}
			if m, err := h.StartManaged(e.ctx()); !errors.Is(err, lease.ErrReleased) || !errors.Is(err, lease.ErrLost) || m != nil {
				e.t.Fatalf("StartManaged after Release = %v, %v; want nil and an error matching ErrReleased and ErrLost", m, err)
			}

			// Context done.
			h = acquire(e.key("cancelled"))
			ctx, cancel := context.WithCancel(e.ctx())
			cancel()
			if m, err := h.StartManaged(ctx); !errors.Is(err, context.Canceled) || m != nil {
				e.t.Fatalf("StartManaged with a cancelled context = %v, %v; want nil, context.Canceled", m, err)
			}
			// Nothing started: a renewer can still be started.
			m, err = h.StartManaged(e.ctx())
			if err != nil {
				e.t.Fatalf("StartManaged after a refused start: %v", err)
			}
			_ = h.Release(e.ctx())
			_ = m.Stop(e.ctx())

			// Known lost: another acquisition took the key after expiry.
			key := e.key("lost")
			h = acquire(key)
			e.expire(e.s.TTL)
			if _, err := e.client("other").TryAcquire(e.ctx(), key, e.policy()); err != nil {
				e.t.Fatalf("TryAcquire after expiry: %v", err)
			}
			e.mustLose("Validate after takeover", h.Validate(e.ctx()), lease.Superseded)
			_, err = h.StartManaged(e.ctx())
			e.mustLose("StartManaged after takeover", err, lease.Superseded)

			// Local deadline passed (checked on the client's clock: a
			// fake one here, so that no backend clock needs to move).
			clock := NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			h, err = e.clientOn(e.b, "owner", clock).TryAcquire(e.ctx(), e.key("deadline"), p)
			if err != nil {
				e.t.Fatal(err)
			}
			clock.Advance(p.LocalLifetime())
			m, err = h.StartManaged(e.ctx())
			e.mustLose("StartManaged after the local deadline", err, lease.DeadlinePassed)
			if m != nil {
				e.t.Fatal("StartManaged after the local deadline returned a renewer")
			}
			_ = h.Release(e.ctx())
		}},
	}
}
