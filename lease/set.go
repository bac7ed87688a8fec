package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// AcquireSet acquires the leases on every key of keys together, all or
// nothing, in one operation of the backend, waiting for them as Acquire
// waits for a lease: on a backend that reports releases it sleeps until
// any key of the set is released, or until the lease of the first key it
// found held would end. Wait, MaxAttempts, ctx, the attempts'
// OperationTimeout, the idempotent retry of an unanswered attempt and the
// errors are those of Acquire; a refusal matches ErrNotAcquired, and
// errors.As finds the *NotAcquiredError naming the first key found held
// (its Key) and its holder. While it waits, it holds none of the keys, so
// two acquisitions of overlapping sets never wait for each other in a
// cycle.
//
// keys is a set: their order does not matter, and a key given twice is
// taken once. There must be 1 to MaxSetKeys distinct keys, each valid
// (otherwise the error matches ErrInvalidKey), and the backend must
// implement SetAcquirer (otherwise the error matches ErrMisconfigured and
// errors.ErrUnsupported, and names the backend's type); all of this is
// checked before any I/O. A Valkey cluster also needs every key in one
// hash slot (see docs/semaphores-and-sets.md).
//
// The Handle holds every key with one token, strictly greater than every
// token issued before for each of the keys. Keys() returns them sorted;
// Key() is their names joined by ",", for logs and events. Renew,
// StartManaged and Release act on all of the keys in one operation each;
// Validate inspects each. A set has no single snapshot: fence a write to
// the resource of one key with SnapshotFor(key).
//
// If an attempt went unanswered and AcquireSet gives up, it releases
// whatever that attempt may have granted with SetAcquirer.ReleaseSet,
// under a context detached from ctx and bounded by OperationTimeout.
func (c *Client) AcquireSet(ctx context.Context, keys []string, p Policy) (*Handle, error) {
	t, err := c.setTarget(keys)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, &t, p, false)
}

// TryAcquireSet makes exactly one attempt to acquire the leases on every
// key of keys together, bounded by p's OperationTimeout, ignoring p's Wait
// and MaxAttempts. It never waits for a holder. Errors are as for
// AcquireSet.
func (c *Client) TryAcquireSet(ctx context.Context, keys []string, p Policy) (*Handle, error) {
	t, err := c.setTarget(keys)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, &t, p, true)
}

// setTarget validates the arguments of AcquireSet and returns its target,
// with the keys sorted and without duplicates, in a slice of its own.
func (c *Client) setTarget(keys []string) (target, error) {
	const op = "acquire set"
	if len(keys) == 0 {
		return target{}, wrapOp(op, "", fmt.Errorf("%w: no key", ErrInvalidKey))
	}
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return target{}, wrapOp(op, "", err)
		}
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	sorted = slices.Clip(slices.Compact(sorted))
	name := strings.Join(sorted, ",")
	if len(sorted) > MaxSetKeys {
		return target{}, wrapOp(op, "", fmt.Errorf("%w: %d keys, more than MaxSetKeys (%d)", ErrInvalidKey, len(sorted), MaxSetKeys))
	}
	sa, ok := c.b.(SetAcquirer)
	if !ok {
		return target{}, wrapOp(op, name, unsupported(c.b, "lease.SetAcquirer", "sets of keys"))
	}
	return target{kind: setKind, op: op, key: name, keys: sorted, sa: sa}, nil
}

// nameMember returns err, an error about a set named set, so that it names
// the key of the set it is about: a *NotAcquiredError or *LostError whose
// Key is not set itself is wrapped in a *memberError. Other errors are
// returned as they are.
func nameMember(set string, err error) error {
	if err == nil {
		return nil
	}
	var member *memberError
	if errors.As(err, &member) {
		return err
	}
	var key string
	var na *NotAcquiredError
	var lost *LostError
	switch {
	case errors.As(err, &na):
		key = na.Key
	case errors.As(err, &lost):
		key = lost.Key
	}
	if key == "" || key == set {
		return err
	}
	return &memberError{key: key, err: err}
}

// memberError is an error about one key of a set. Wrapped by a Client
// operation, which names the set, it reads
// lease: renew "a,b": key "b": token 7 lost: force-released.
type memberError struct {
	key string
	err error
}

func (e *memberError) Error() string  { return "lease: " + e.detail() }
func (e *memberError) detail() string { return "key " + strconv.Quote(e.key) + ": " + detail(e.err) }
func (e *memberError) Unwrap() error  { return e.err }
