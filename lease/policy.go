package lease

import (
	"fmt"
	"time"
)

// PolicyOptions configure a Policy. The zero value of every field except TTL
// means its default; negative values are invalid. Pass it to NewPolicy,
// which also checks the rules between the fields: SafetyMargin < TTL, and
// RenewEvery + Retry + 2×OperationTimeout ≤ TTL − SafetyMargin, so that a
// renewal started on schedule can time out and still be retried before the
// local deadline.
type PolicyOptions struct {
	// TTL is how long the backend keeps the lease without a renewal,
	// measured on the backend's clock. Required; at least 10ms and at most
	// 24h. Backends keep whole milliseconds and round up.
	TTL time.Duration

	// RenewEvery is how often Managed renews the lease. Default TTL/3.
	RenewEvery time.Duration

	// SafetyMargin is subtracted from the TTL to compute the local deadline,
	// to absorb a difference in clock rates between client and backend.
	// Default TTL/6. Must be less than TTL.
	SafetyMargin time.Duration

	// OperationTimeout bounds every single backend call, on real time
	// whatever the Client's Clock (the call's context gets it as a
	// deadline, as context.WithTimeout gives one). Default the smaller of
	// TTL/10 and 5s.
	OperationTimeout time.Duration

	// Retry is the pause between two renewal attempts after a transient
	// error, and between two attempts of Acquire after a backend error or
	// when the backend does not say how long the holder keeps the key. Each
	// pause is shortened by a random amount of up to 20%, never lengthened.
	// Default the smaller of 100ms and TTL/20.
	//
	// On a backend without release notifications (no
	// lease.ReleaseWatcher, or leasepostgres with DisableNotify), an
	// Acquire that finds the key held asks again every Retry, and no later
	// than the holder's expiry: asking is its only way to see a release.
	// On a backend with them, it sleeps until the holder's remaining time
	// runs out instead (plus up to Retry/5, so that waiters do not all
	// arrive at once), or until a release notification, see Poll.
	Retry time.Duration

	// Poll is the least time between two attempts of an Acquire that
	// waits for a holder who keeps renewing, on a backend that notifies
	// releases (lease.ReleaseWatcher): a release wakes the waiter at once,
	// so further attempts only look for a holder that stopped renewing
	// without releasing. Such a holder's lease is then taken over up to
	// Poll minus the remaining time the waiter last saw after its expiry,
	// instead of at its expiry. Lower Poll to take over sooner after a
	// holder's crash, at the cost of more backend calls per waiter. Before
	// the waiter has seen the holder renew, Acquire sleeps until the
	// holder's remaining time runs out. Without a watcher Poll does not
	// apply (see Retry). Default TTL, so
	// that an idle waiter makes at most one backend call per TTL; at most
	// TTL.
	Poll time.Duration

	// Wait bounds how long Acquire keeps trying while the lease is held by
	// someone else or the backend fails. Default 0: no bound, Acquire waits
	// until it gets the lease or its context ends, as sync.Mutex.Lock and
	// semaphore.Acquire do. TryAcquire ignores it and makes one attempt.
	Wait time.Duration

	// MaxAttempts caps the number of attempts Acquire makes. Default 0: no
	// cap other than Wait and the context. MaxAttempts 1 makes Acquire
	// behave like TryAcquire.
	MaxAttempts int
}

// A Policy is a validated, immutable set of PolicyOptions with defaults
// applied. The zero Policy is not valid; build one with NewPolicy.
type Policy struct {
	o PolicyOptions
}

// Limits on TTL.
const (
	MinTTL = 10 * time.Millisecond
	MaxTTL = 24 * time.Hour
)

// NewPolicy applies defaults to o and validates every field and the rules
// between them:
//
//   - TTL is between MinTTL and MaxTTL;
//   - RenewEvery, SafetyMargin, OperationTimeout, Retry, Poll, Wait and
//     MaxAttempts are not negative;
//   - SafetyMargin < TTL;
//   - RenewEvery, Retry, OperationTimeout and Poll are each at most TTL;
//   - RenewEvery + Retry + 2×OperationTimeout ≤ TTL − SafetyMargin: a
//     renewal started on schedule can time out and still leave time for one
//     retry before the local deadline.
//
// The error wraps ErrInvalidPolicy and names the field, its value and the
// rule.
func NewPolicy(o PolicyOptions) (Policy, error) {
	bad := func(format string, args ...any) (Policy, error) {
		return Policy{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidPolicy}, args...)...)
	}
	if o.TTL < MinTTL || o.TTL > MaxTTL {
		return bad("TTL (%v) must be between %v and %v", o.TTL, MinTTL, MaxTTL)
	}
	for _, f := range []field{
		{"RenewEvery", o.RenewEvery},
		{"SafetyMargin", o.SafetyMargin},
		{"OperationTimeout", o.OperationTimeout},
		{"Retry", o.Retry},
		{"Poll", o.Poll},
		{"Wait", o.Wait},
	} {
		if f.v < 0 {
			return bad("%s (%v) must not be negative", f.name, f.v)
		}
	}
	if o.MaxAttempts < 0 {
		return bad("MaxAttempts (%d) must not be negative", o.MaxAttempts)
	}
	if o.RenewEvery == 0 {
		o.RenewEvery = o.TTL / 3
	}
	if o.SafetyMargin == 0 {
		o.SafetyMargin = o.TTL / 6
	}
	if o.OperationTimeout == 0 {
		o.OperationTimeout = min(o.TTL/10, 5*time.Second)
	}
	if o.Retry == 0 {
		o.Retry = min(100*time.Millisecond, o.TTL/20)
	}
	if o.Poll == 0 {
		o.Poll = o.TTL
	}
	if o.SafetyMargin >= o.TTL {
		return bad("SafetyMargin (%v) must be less than TTL (%v)", o.SafetyMargin, o.TTL)
	}
	// Each term of the sum below on its own first, so that huge values
	// cannot overflow it into a small one.
	for _, f := range []field{{"RenewEvery", o.RenewEvery}, {"Retry", o.Retry}, {"OperationTimeout", o.OperationTimeout}, {"Poll", o.Poll}} {
		if f.v > o.TTL {
			return bad("%s (%v) must not exceed TTL (%v)", f.name, f.v, o.TTL)
		}
	}
	if need, have := o.RenewEvery+o.Retry+2*o.OperationTimeout, o.TTL-o.SafetyMargin; need > have {
		return bad("RenewEvery (%v) + Retry (%v) + 2×OperationTimeout (%v) = %v must not exceed TTL−SafetyMargin (%v), so that a renewal that times out can still be retried before the local deadline",
			o.RenewEvery, o.Retry, o.OperationTimeout, need, have)
	}
	return Policy{o: o}, nil
}

// field is a duration of PolicyOptions and its name, for error messages.
type field struct {
	name string
	v    time.Duration
}

// Options returns the options with defaults applied.
func (p Policy) Options() PolicyOptions { return p.o }

// TTL returns the policy's TTL.
func (p Policy) TTL() time.Duration { return p.o.TTL }

// LocalLifetime returns TTL − SafetyMargin: how long after sending an
// acquire or renew request the client considers the lease its own.
func (p Policy) LocalLifetime() time.Duration { return p.o.TTL - p.o.SafetyMargin }

func (p Policy) valid() bool { return p.o.TTL != 0 }

func (p Policy) String() string {
	o := p.o
	return fmt.Sprintf("Policy{TTL: %v, RenewEvery: %v, SafetyMargin: %v, OperationTimeout: %v, Retry: %v, Poll: %v, Wait: %v, MaxAttempts: %d}",
		o.TTL, o.RenewEvery, o.SafetyMargin, o.OperationTimeout, o.Retry, o.Poll, o.Wait, o.MaxAttempts)
}
