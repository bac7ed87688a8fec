package lease

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors. Test for them with [errors.Is]; the typed errors below
// carry the facts and match the sentinels.
var (
	// ErrNotAcquired means the lease is held by another acquisition. The
	// error returned by Acquire and TryAcquire is a *NotAcquiredError with the
	// holder and the remaining time when the backend knows them.
	ErrNotAcquired = errors.New("lease: not acquired")

	// ErrLost means the backend says this acquisition is no longer current:
	// it expired, was released, or another acquisition holds the lease. The
	// error is a *LostError saying which.
	ErrLost = errors.New("lease: lost")

	// ErrIndeterminate means the outcome of a request is unknown: it may or
	// may not have been applied by the backend (a timeout or a connection
	// lost after the request was sent), or may still be applied later.
	// After an indeterminate Release the lease may stay held until its TTL
	// passes; after an indeterminate Acquire or TryAcquire the key may be
	// held, by nobody, for up to one TTL (see Client.Acquire). An error that
	// does not match ErrIndeterminate means the outcome is known.
	ErrIndeterminate = errors.New("lease: outcome unknown")

	// ErrMisconfigured means the backend refused a request for a reason
	// that no retry can cure: a missing table or column, a missing
	// privilege or ACL permission, a wrong password, a connection pooler
	// that loses prepared statements. The error's text says what to
	// change. Client.Acquire returns it at once instead of waiting.
	// Backends mark such errors with Misconfigured.
	ErrMisconfigured = errors.New("lease: backend misconfigured")

	// ErrInvalidOffer wraps the error of Handle.HandOff for an Offer that
	// is not valid; nothing was sent.
	ErrInvalidOffer = errors.New("lease: invalid offer")

	// ErrInvalidPolicy wraps every error returned by NewPolicy.
	ErrInvalidPolicy = errors.New("lease: invalid policy")

	// ErrInvalidKey wraps the error for a key that breaks a rule of
	// ValidateKey. It is returned before any I/O.
	ErrInvalidKey = errors.New("lease: invalid key")

	// ErrInvalidOwner wraps the error for an owner that breaks a rule of
	// ValidateOwner.
	ErrInvalidOwner = errors.New("lease: invalid owner")

	// ErrReleased is the cause of a Managed context that was cancelled
	// because its handle was released, and the error of Renew on a released
	// handle (which also matches ErrLost).
	ErrReleased = errors.New("lease: released")

	// ErrStopped is the cause of a Managed context that was cancelled because
	// Stop was called.
	ErrStopped = errors.New("lease: managed renewal stopped")

	// ErrAlreadyManaged is the error of Handle.StartManaged on a handle that
	// already has a renewer: a Handle is renewed by at most one Managed in
	// its life.
	ErrAlreadyManaged = errors.New("lease: already managed")
)

// NotAcquiredError reports that a lease is held by someone else. It matches
// ErrNotAcquired.
type NotAcquiredError struct {
	Key string
	// Holder is the owner string of the current holder, if known.
	Holder string
	// Token is the current holder's token, if known (0 otherwise).
	Token Token
	// Remaining is the holder's remaining time on the backend's clock when
	// the backend answered, if known (0 otherwise).
	Remaining time.Duration
	// Candidates are the owners a hand-off offered the key to, if the key
	// is refused because of that offer (Holder is then ""): Remaining is
	// what is left of the accept window and Token the offered token.
	Candidates []string
}

// Error reads: lease: "k" is held by "worker-a" (token 3) for another 1.5s.
// Wrapped by a Client operation it reads: lease: acquire "k": held by ….
func (e *NotAcquiredError) Error() string {
	return "lease: " + strconv.Quote(e.Key) + " is " + e.detail()
}

func (e *NotAcquiredError) detail() string {
	if len(e.Candidates) > 0 {
		return fmt.Sprintf("offered to %s (token %d) for another %v", quoteList(e.Candidates), e.Token, e.Remaining.Round(time.Millisecond))
	}
	if e.Holder == "" {
		return "held by another acquisition"
	}
	return fmt.Sprintf("held by %q (token %d) for another %v", e.Holder, e.Token, e.Remaining.Round(time.Millisecond))
}

// Is reports whether target is ErrNotAcquired.
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// LostReason says why an acquisition is no longer current.
type LostReason int

const (
	// Expired means no other acquisition took the lease after this one, but
	// this one is no longer held: its TTL passed on the backend's clock, or
	// its holder released it.
	Expired LostReason = iota + 1
	// Superseded means another acquisition holds, or has held, the lease
	// since this one.
	Superseded
	// DeadlinePassed means the local deadline passed without a confirmed
	// renewal; the backend was not reachable to say either way.
	DeadlinePassed
	// ForceReleased means an operator ended this acquisition with a
	// [ForceReleaser] (leasectl release --force), and nobody has acquired
	// the key since.
	ForceReleased
	// RecordLost means the backend has no record of the key at all: it lost
	// data (a restart without persistence, a failover to a replica that
	// missed writes, eviction) or removed the record after its retention
	// period. The key's next token still rises above this one's wherever
	// tokens are seeded from the backend's clock.
	RecordLost
	// HandedOff means this acquisition handed the lease over
	// (Handle.HandOff): the backend ended it and offered the key to
	// successors, with a higher token.
	HandedOff
)

// String returns the reason as leasectl and the metrics adapters print it:
// "expired", "superseded", "local deadline passed", "force-released" or
// "record lost" or "handed off".
func (r LostReason) String() string {
	switch r {
	case Expired:
		return "expired"
	case Superseded:
		return "superseded"
	case DeadlinePassed:
		return "local deadline passed"
	case ForceReleased:
		return "force-released"
	case RecordLost:
		return "record lost"
	case HandedOff:
		return "handed off"
	}
	return fmt.Sprintf("LostReason(%d)", int(r))
}

// LostError reports that an acquisition is no longer current. It matches
// ErrLost, and ErrReleased when the handle was released by its owner.
type LostError struct {
	Key    string
	Token  Token
	Reason LostReason
	// Err is the last error seen before the loss, if any (for example the
	// transport error that kept renewals from reaching the backend), or
	// ErrReleased.
	Err error
}

// Error reads: lease: "k" token 7 lost: expired. Wrapped by a Client
// operation it reads: lease: renew "k": token 7 lost: expired.
func (e *LostError) Error() string { return "lease: " + strconv.Quote(e.Key) + " " + e.detail() }

func (e *LostError) detail() string {
	if e.Reason == Expired && e.Err == ErrReleased {
		return fmt.Sprintf("token %d already released", e.Token)
	}
	s := fmt.Sprintf("token %d lost: %v", e.Token, e.Reason)
	if e.Err != nil {
		s += ": " + detail(e.Err)
	}
	return s
}

// Is reports whether target is ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Unwrap returns the underlying error, if any.
func (e *LostError) Unwrap() error { return e.Err }

// Indeterminate wraps err so that it matches ErrIndeterminate while keeping
// err in the chain. Backends use it for a request that may have been
// applied. It returns nil if err is nil.
func Indeterminate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrIndeterminate) {
		return err
	}
	return &indeterminateError{err}
}

type indeterminateError struct{ err error }

func (e *indeterminateError) Error() string   { return e.detail() }
func (e *indeterminateError) detail() string  { return "outcome unknown: " + detail(e.err) }
func (e *indeterminateError) Unwrap() []error { return []error{ErrIndeterminate, e.err} }

// Misconfigured wraps err so that it matches ErrMisconfigured while keeping
// err in the chain and its text unchanged. Backends use it for a refusal
// that no retry can cure (see ErrMisconfigured); a request that may have
// been applied is not a refusal, so an err matching ErrIndeterminate is
// returned as it is. It returns nil if err is nil.
func Misconfigured(err error) error {
	if err == nil || errors.Is(err, ErrIndeterminate) || errors.Is(err, ErrMisconfigured) {
		return err
	}
	return &misconfiguredError{err}
}

type misconfiguredError struct{ err error }

func (e *misconfiguredError) Error() string   { return e.err.Error() }
func (e *misconfiguredError) detail() string  { return detail(e.err) }
func (e *misconfiguredError) Unwrap() []error { return []error{ErrMisconfigured, e.err} }

// unknownAcquireError is the error of an Acquire that gave up after an
// attempt went unanswered. The client released what the attempt may have
// granted, but no answer to that release proves that the attempt can no
// longer be applied (it may be stalled in the backend and apply after the
// release), so the outcome stays unknown: it matches ErrIndeterminate, and
// keeps the cause (a timeout, a transport error, the context's end) in its
// chain.
type unknownAcquireError struct {
	err     error // why Acquire gave up
	release error // the clean-up release's error; nil if it ended a grant
}

func (e *unknownAcquireError) Error() string { return e.detail() }

func (e *unknownAcquireError) detail() string {
	cause := e.err
	if ie, ok := cause.(*indeterminateError); ok {
		cause = ie.err // say "outcome unknown" once
	}
	var note string
	switch {
	case e.release == nil:
		note = "the clean-up release ended what an attempt had granted; a delayed attempt may still be granted"
	case errors.Is(e.release, ErrLost):
		note = "the clean-up release found nothing held; a delayed attempt may still be granted"
	default:
		note = "the clean-up release failed too: " + detail(e.release)
	}
	return "outcome unknown: " + detail(cause) + " (" + note + ")"
}

func (e *unknownAcquireError) Unwrap() []error { return []error{ErrIndeterminate, e.err} }

// waitError is the error of an Acquire whose context ended after at least
// one attempt: it matches the context's cause, and its text also says what
// the attempts found, so that an operator sees why the wait never ended.
type waitError struct {
	cause    error // context.Cause
	attempts int
	last     error // the last attempt's error, or nil to say nothing more
}

func (e *waitError) Error() string { return e.detail() }

func (e *waitError) detail() string {
	s := detail(e.cause)
	if e.last == nil {
		return s
	}
	plural := "s"
	if e.attempts == 1 {
		plural = ""
	}
	last := e.last
	if ie, ok := last.(*indeterminateError); ok {
		last = ie.err
	}
	return fmt.Sprintf("%s after %d attempt%s; the last: %s", s, e.attempts, plural, detail(last))
}

func (e *waitError) Unwrap() error { return e.cause }

// opError wraps an error with the operation and the key, which it names
// once: lease: renew "billing/nightly": <cause>. An opError with no key
// (the key itself was invalid, or the operation has none) reads
// lease: acquire: <cause>.
type opError struct {
	op  string
	key string
	err error
}

func (e *opError) Error() string {
	if e.key == "" {
		return "lease: " + e.op + ": " + detail(e.err)
	}
	return "lease: " + e.op + " " + strconv.Quote(e.key) + ": " + detail(e.err)
}

func (e *opError) detail() string { return detail(e.err) }
func (e *opError) Unwrap() error  { return e.err }

// wrapOp wraps err with the operation and key.
func wrapOp(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return &opError{op: op, key: key, err: err}
}

// detailer is implemented by this package's errors: detail is the text
// without the "lease: " prefix and without the key, for an error that an
// opError (which names both) wraps.
type detailer interface{ detail() string }

// detail returns err's text as a cause inside another error of this
// package: without the package prefix, which the outer error already
// carries, and without the key when err is one of this package's typed
// errors.
func detail(err error) string {
	if d, ok := err.(detailer); ok {
		return d.detail()
	}
	s := err.Error()
	if t, ok := strings.CutPrefix(s, "lease: "); ok {
		return t // a sentinel of this package, or an error wrapping one
	}
	return s
}
