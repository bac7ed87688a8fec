package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// A Handle is one acquisition: of a lease (Client.Acquire), of a permit
// of a semaphore (Client.AcquirePermit) or of a set of keys
// (Client.AcquireSet). Its keys, owner and token never change; its local
// deadline moves forward with each renewal. A Handle is safe for
// concurrent use.
//
// The lease does not stop work by itself when it ends: pass Token (or
// Snapshot, or SnapshotFor) to every protected write so that the storage
// can reject a stale holder, and stop work when Deadline passes or Managed
// reports a loss.
type Handle struct {
	c      *Client
	key    string // the lease key, the permit key, or a set's keys joined by ","
	nonce  string
	token  Token
	policy Policy
	keys   []string // a set's keys, sorted; nil for a lease or a permit
	sem    string   // a permit's semaphore key; "" for a lease or a set
	slot   int      // a permit's slot

	mu       sync.Mutex
	deadline time.Time
	released bool
	lost     *LostError // the backend or a renewer said the acquisition is gone
	managed  *Managed
}

// Key returns the leased key: for a permit, its permit key
// (PermitKey(semaphore, slot)); for a set, its keys joined by "," in
// sorted order, a name for logs and events only (a key may itself hold a
// comma: use Keys).
func (h *Handle) Key() string { return h.key }

// Keys returns the keys this handle holds, in a slice of its own: [Key()]
// for a lease or a permit, and for a set its keys, sorted by bytes and
// without duplicates.
func (h *Handle) Keys() []string {
	if h.keys != nil {
		return slices.Clone(h.keys)
	}
	return []string{h.key}
}

// Permit reports whether the handle holds a permit of a semaphore, and if
// so which: the semaphore's key and the permit's slot, in 0..permits−1.
// Key is then PermitKey(semaphore, slot).
func (h *Handle) Permit() (semaphore string, slot int, ok bool) {
	return h.sem, h.slot, h.sem != ""
}

// Owner returns the owner string of the client that acquired the lease.
func (h *Handle) Owner() string { return h.c.owner }

// Token returns the fencing token of this acquisition.
func (h *Handle) Token() Token { return h.token }

// Policy returns the policy the lease was acquired with.
func (h *Handle) Policy() Policy { return h.policy }

// Deadline returns the local deadline: the instant, on the client's clock,
// after which the holder must assume the lease is gone. It is the send time
// of the last successful acquire or renew request plus TTL − SafetyMargin,
// so it is never later than the backend's expiry as long as the client's
// clock does not run slower than the backend's by more than the margin.
func (h *Handle) Deadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

// Snapshot returns the acquisition's coordinates for fences and guards.
// For a permit they are those of its permit key: a fence by the permit
// key fences the resource per slot (see SnapshotFor to fence it per
// semaphore).
//
// A set has one snapshot per key: use SnapshotFor. Snapshot of a set
// returns one whose Key is Key() and whose Token is 0, so that Valid
// reports false and every fence refuses it before any I/O.
func (h *Handle) Snapshot() Snapshot {
	s := Snapshot{Key: h.key, Owner: h.c.owner, Token: h.token, Deadline: h.Deadline()}
	if h.keys != nil {
		s.Token = 0
	}
	return s
}

// SnapshotFor returns the acquisition's coordinates for fences and
// guards under key, which must be one of Keys(), or, for a permit, its
// semaphore's key:
//
//   - a key of a set: the set's token under that key, the token the
//     backend issued for it;
//   - a permit's semaphore key: the permit's token under the semaphore's
//     key. Permit tokens rise across the whole semaphore, so a resource
//     fenced by the semaphore's key admits the permit that wrote it last
//     and refuses every permit granted before that one, whatever its
//     slot;
//   - Key() of a lease or a permit: Snapshot().
//
// Any other key returns an error matching ErrInvalidKey, and the zero
// Snapshot.
func (h *Handle) SnapshotFor(key string) (Snapshot, error) {
	if key == h.key && h.keys == nil || key == h.sem && h.sem != "" || h.holds(key) {
		return Snapshot{Key: key, Owner: h.c.owner, Token: h.token, Deadline: h.Deadline()}, nil
	}
	var err error
	if h.sem != "" {
		err = fmt.Errorf("%w: %q is neither the permit key nor the semaphore key of this handle, permit %d of %q", ErrInvalidKey, key, h.slot, h.sem)
	} else {
		err = fmt.Errorf("%w: %q is not a key of this handle, which holds %q", ErrInvalidKey, key, h.key)
	}
	return Snapshot{}, wrapOp("snapshot", h.key, err)
}

// holds reports whether key is a key of h's set.
func (h *Handle) holds(key string) bool {
	_, ok := slices.BinarySearch(h.keys, key)
	return ok
}

// wrap wraps err with the operation and the handle's key, and for a set
// also names the key of the set that err is about.
func (h *Handle) wrap(op string, err error) error {
	if h.keys != nil {
		err = nameMember(h.key, err)
	}
	return wrapOp(op, h.key, err)
}

// info returns the fields of h's events that do not change.
func (h *Handle) info() EventInfo {
	return EventInfo{Key: h.key, Semaphore: h.sem, Keys: h.keys, Owner: h.c.owner, Token: h.token}
}

func (h *Handle) acquisition() Acquisition {
	return Acquisition{Key: h.key, Owner: h.c.owner, Nonce: h.nonce, Token: h.token}
}

// Renew extends the lease by its TTL on the backend's clock, keeping the
// token, and moves the local deadline to the request's send time plus
// TTL − SafetyMargin. The call is bounded by ctx and OperationTimeout. A
// permit renews its permit key as any lease; a set renews all its keys in
// one operation (SetAcquirer.RenewSet), or none of them.
//
// It returns an error matching ErrLost (errors.As finds the *LostError) if
// the backend says this acquisition is no longer current, or if the handle
// was released (then the error also matches ErrReleased); an error
// matching ErrIndeterminate if the outcome is unknown (the local deadline
// then stays where it was); or another backend error, after which nothing
// changed. Every error reads lease: renew "key": <cause>.
func (h *Handle) Renew(ctx context.Context) error {
	return h.renew(ctx, nil)
}

// renew renews the lease. With a watchdog (a managed renewer's), the call
// is also bounded by the local deadline, so that the renewer never acts as
// holder past it, and the watchdog is armed to fire at the deadline should
// the backend not have returned by then.
func (h *Handle) renew(ctx context.Context, watchdog *time.Timer) error {
	clock, o := h.c.clock, h.policy.o
	h.mu.Lock()
	released, deadline := h.released, h.deadline
	h.mu.Unlock()
	info := h.info()
	if released {
		return h.wrap("renew", h.releasedError())
	}
	sent := clock.Now()
	timeout := o.OperationTimeout
	if watchdog != nil {
		left := deadline.Sub(sent)
		timeout = min(timeout, left)
		// The context bounds a backend that keeps the contract; the
		// watchdog bounds one that does not return when its context ends.
		watchdog.Reset(left)
	}
	// timeout runs on real time, whatever the client's clock.
	octx, cancel := context.WithTimeout(ctx, timeout)
	var err error
	if h.keys != nil {
		err = h.c.b.(SetAcquirer).RenewSet(octx, h.keys, h.acquisition(), o.TTL)
	} else {
		err = h.c.b.Renew(octx, h.acquisition(), o.TTL)
	}
	if watchdog != nil {
		watchdog.Stop()
	}
	cancel()
	if err != nil {
		h.noteLost(err)
		err = h.wrap("renew", err)
		if !h.c.quiet {
			info.Latency, info.Err = clock.Now().Sub(sent), err
			h.c.obs.Observe(&RenewFailed{info})
		}
		return err
	}
	h.mu.Lock()
	if d := sent.Add(h.policy.LocalLifetime()); d.After(h.deadline) {
		h.deadline = d
	}
	deadline = h.deadline
	h.mu.Unlock()
	if !h.c.quiet {
		now := clock.Now()
		info.Latency = now.Sub(sent)
		h.c.obs.Observe(&Renewed{info, deadline.Sub(now)})
	}
	return nil
}

// Validate asks the backend whether this acquisition still holds the lease
// (of a set: every key of it, one Inspect call each, in order). It returns
// nil if so, an error matching ErrLost (errors.As finds the *LostError,
// for a set that of the first key no longer held) if not, or the
// backend's error. It reads the key's record with Inspect, which does not
// say how an acquisition ended: a forced release reads as Expired here,
// where Renew says ForceReleased. A nil result is already history when it
// returns: use a fence, not Validate, to protect a write.
func (h *Handle) Validate(ctx context.Context) error {
	for _, key := range h.Keys() {
		if err := h.validate(ctx, key); err != nil {
			return h.wrap("validate", err)
		}
	}
	return nil
}

// validate inspects key, one of h's keys, and returns nil if h holds it,
// the *LostError saying why not, or the backend's error.
func (h *Handle) validate(ctx context.Context, key string) error {
	octx, cancel := context.WithTimeout(ctx, h.policy.o.OperationTimeout)
	r, err := h.c.b.Inspect(octx, key)
	cancel()
	if err != nil {
		if h.keys != nil {
			err = &memberError{key: key, err: err}
		}
		return err
	}
	var lost *LostError
	switch {
	case r.Held && r.Token == h.token && r.Owner == h.c.owner:
		return nil
	case r.Token == 0:
		lost = &LostError{Key: key, Token: h.token, Reason: RecordLost}
	case r.Token > h.token || r.Held && r.Token != h.token:
		lost = &LostError{Key: key, Token: h.token, Reason: Superseded}
	default:
		lost = &LostError{Key: key, Token: h.token, Reason: Expired}
	}
	h.noteLost(lost)
	return lost
}

// noteLost records err if it says the acquisition is gone, so that
// StartManaged can refuse to renew it.
func (h *Handle) noteLost(err error) {
	var lost *LostError
	if !errors.As(err, &lost) {
		return
	}
	h.mu.Lock()
	if h.lost == nil {
		h.lost = lost
	}
	h.mu.Unlock()
}

// releasedError is the error of an operation on a released handle.
func (h *Handle) releasedError() error {
	return &LostError{Key: h.key, Token: h.token, Reason: Expired, Err: ErrReleased}
}

// Release ends this acquisition on the backend, so the key is free at once
// (a set's keys: all of them, in one operation), and stops managed renewal
// (without a loss event). The call is bounded by
// ctx and OperationTimeout; to release during shutdown when ctx may already
// be cancelled, pass context.WithoutCancel(ctx).
//
// It returns nil if the backend released the lease; an error matching
// ErrLost (errors.As finds the *LostError) if the acquisition was already
// gone (expired, superseded, or released before, the last also matching
// ErrReleased; for a set, if any key was, after the others were released); an error matching ErrIndeterminate if the outcome is
// unknown, in which case the lease may stay held until its TTL passes; or
// another backend error, after which the lease stays held until its TTL
// passes. The handle is released locally either way and cannot be renewed.
// Every error reads lease: release "key": <cause>.
func (h *Handle) Release(ctx context.Context) error {
	h.mu.Lock()
	already := h.released
	h.released = true
	if h.managed != nil {
		// Under the lock and before the backend call, so that a renewal
		// refused because of this release is never mistaken for a loss.
		h.managed.cancel(ErrReleased)
	}
	h.mu.Unlock()
	if already {
		return h.wrap("release", h.releasedError())
	}
	err := h.end(ctx, "release", func(ctx context.Context) error {
		if h.keys != nil {
			return h.c.b.(SetAcquirer).ReleaseSet(ctx, h.keys, h.acquisition())
		}
		return h.c.b.Release(ctx, h.acquisition())
	})
	if err == nil {
		h.c.maybeSweep()
	}
	return err
}

// end makes the backend call that ends this acquisition (a release or a
// hand-off), bounded by ctx and OperationTimeout, wraps its error as op,
// and emits the Released or ReleaseFailed event.
func (h *Handle) end(ctx context.Context, op string, call func(context.Context) error) error {
	// The client's clock is read for the event's latency only.
	var start time.Time
	if !h.c.quiet {
		start = h.c.clock.Now()
	}
	octx, cancel := context.WithTimeout(ctx, h.policy.o.OperationTimeout)
	err := call(octx)
	cancel()
	if err != nil {
		err = h.wrap(op, err)
	}
	if !h.c.quiet {
		info := h.info()
		info.Latency, info.Err = h.c.clock.Now().Sub(start), err
		if err != nil {
			h.c.obs.Observe(&ReleaseFailed{info})
		} else {
			h.c.obs.Observe(&Released{info})
		}
	}
	return err
}
