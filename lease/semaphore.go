package lease

import (
	"context"
	"errors"
	"fmt"
)

// AcquirePermit acquires one permit of the semaphore named key, which has
// permits permits (1 ≤ permits ≤ MaxPermits), waiting for one as Acquire
// waits for a lease: on a backend that reports releases it sleeps until
// any permit below permits is released, or until the permit that ends
// first would end. Wait, MaxAttempts, ctx, the attempts' OperationTimeout,
// the idempotent retry of an unanswered attempt and the errors are those
// of Acquire; a refusal is an error matching ErrNotAcquired, and errors.As
// finds the *NotAcquiredError naming the holder whose permit ends first.
//
// The backend must implement PermitAcquirer: otherwise AcquirePermit
// fails before any I/O with an error matching ErrMisconfigured and
// errors.ErrUnsupported that names the backend's type. An invalid key (also one whose
// permit keys PermitKey(key, permits−1) would be too long) matches
// ErrInvalidKey; a number of permits out of range is refused before any
// I/O too.
//
// The Handle holds the lowest free permit: Permit() says which slot, Key()
// is its permit key PermitKey(key, slot), an ordinary lease that Renew,
// StartManaged, Validate and Release serve as any other (so do
// Client.Inspect, leasectl and the fences). Its token is strictly greater
// than every token issued before for any permit of the semaphore,
// whatever the slot, also after the backend lost its data: fence a
// resource per slot with Snapshot(), or per semaphore with
// SnapshotFor(key) (see docs/semaphores-and-sets.md for which to use).
//
// The number of permits is given by each call, not stored: a call that
// asks with fewer permits than another is granted only a slot below its
// own number, and only while fewer than that many of those slots are
// held, so lowering the number never lets more holders in than the
// highest number in use, nor more than the new number once the permits
// at slots above it have ended. Those permits stay valid meanwhile:
// their renewals are accepted, and the semaphore drains to the new number
// as they are released or expire.
//
// If an attempt went unanswered and AcquirePermit gives up, it releases
// whatever that attempt may have granted: every permit below permits held
// by this call's acquisition secret, under one context detached from ctx
// and bounded by OperationTimeout.
func (c *Client) AcquirePermit(ctx context.Context, key string, permits int, p Policy) (*Handle, error) {
	t, err := c.permitTarget(key, permits)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, &t, p, false)
}

// TryAcquirePermit makes exactly one attempt to acquire a permit of the
// semaphore named key, which has permits permits, bounded by p's
// OperationTimeout, ignoring p's Wait and MaxAttempts. It never waits for
// a holder. Errors are as for AcquirePermit.
func (c *Client) TryAcquirePermit(ctx context.Context, key string, permits int, p Policy) (*Handle, error) {
	t, err := c.permitTarget(key, permits)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, &t, p, true)
}

// permitTarget validates the arguments of AcquirePermit and returns its
// target.
func (c *Client) permitTarget(key string, permits int) (target, error) {
	const op = "acquire permit"
	if err := ValidateKey(key); err != nil {
		return target{}, wrapOp(op, "", err)
	}
	if permits < 1 || permits > MaxPermits {
		return target{}, wrapOp(op, key, fmt.Errorf("%d permits, out of the range 1 to MaxPermits (%d)", permits, MaxPermits))
	}
	if err := ValidateKey(PermitKey(key, permits-1)); err != nil {
		return target{}, wrapOp(op, key, fmt.Errorf("%w: its permit keys, such as %.40q…, would be too long", ErrInvalidKey, PermitKey(key, permits-1)))
	}
	pa, ok := c.b.(PermitAcquirer)
	if !ok {
		return target{}, wrapOp(op, key, unsupported(c.b, "lease.PermitAcquirer", "semaphores"))
	}
	return target{kind: permitKind, op: op, key: key, permits: permits, pa: pa}, nil
}

// unsupported is the error of a call that needs a capability b lacks: no
// retry cures it, so it matches ErrMisconfigured, and errors.ErrUnsupported.
func unsupported(b Backend, capability, what string) error {
	return Misconfigured(fmt.Errorf("%w: backend %T does not implement %s (%s)", errors.ErrUnsupported, b, capability, what))
}

// permitsHeld returns err, a refusal of PermitAcquirer.AcquirePermit, as
// an error that says every permit is held; other errors as they are.
func permitsHeld(permits int, err error) error {
	var na *NotAcquiredError
	if !errors.As(err, &na) {
		return err
	}
	return &permitsHeldError{permits: permits, err: err}
}

// permitsHeldError is the refusal of an AcquirePermit attempt. It reads
// all 3 permits are held; the first to end: held by "w" (token 7) for
// another 2s. errors.As finds the backend's *NotAcquiredError, which
// names that first holder.
type permitsHeldError struct {
	permits int
	err     error
}

func (e *permitsHeldError) Error() string { return "lease: " + e.detail() }

func (e *permitsHeldError) detail() string {
	var na *NotAcquiredError
	errors.As(e.err, &na)
	if e.permits == 1 {
		return "its one permit is " + na.detail()
	}
	return fmt.Sprintf("all %d permits are held; the first to end is %s", e.permits, na.detail())
}

func (e *permitsHeldError) Unwrap() error { return e.err }
