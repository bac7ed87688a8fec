package lease

import (
	"errors"
	"fmt"
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
	// lost after the request was sent). After an indeterminate Release the
	// lease may stay held until its TTL passes.
	ErrIndeterminate = errors.New("lease: outcome unknown")

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
}

func (e *NotAcquiredError) Error() string {
	if e.Holder == "" {
		return fmt.Sprintf("lease: %q is held by another acquisition", e.Key)
	}
	return fmt.Sprintf("lease: %q is held by %q (token %d) for another %v", e.Key, e.Holder, e.Token, e.Remaining)
}

// Is reports whether target is ErrNotAcquired.
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// LostReason says why an acquisition is no longer current.
type LostReason int

const (
	// Expired means no other acquisition took the lease after this one, but
	// this one is no longer held: its TTL passed, it was released, or the
	// backend lost the record.
	Expired LostReason = iota + 1
	// Superseded means another acquisition holds, or has held, the lease
	// since this one.
	Superseded
	// DeadlinePassed means the local deadline passed without a confirmed
	// renewal; the backend was not reachable to say either way.
	DeadlinePassed
)

func (r LostReason) String() string {
	switch r {
	case Expired:
		return "expired"
	case Superseded:
		return "superseded"
	case DeadlinePassed:
		return "local deadline passed"
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
	// transport error that kept renewals from reaching the backend).
	Err error
}

func (e *LostError) Error() string {
	s := fmt.Sprintf("lease: %q token %d lost: %v", e.Key, e.Token, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
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

func (e *indeterminateError) Error() string   { return "outcome unknown: " + e.err.Error() }
func (e *indeterminateError) Unwrap() []error { return []error{ErrIndeterminate, e.err} }

// undoneError is the error of an Acquire whose last attempt went
// unanswered and was then undone by a release: the outcome is known (not
// acquired), so it no longer matches ErrIndeterminate, but it keeps the
// cause (a timeout, a transport error) in its chain.
type undoneError struct{ err error }

// Error does not repeat "outcome unknown": the outcome is known now.
func (e *undoneError) Error() string {
	cause := e.err
	if ie, ok := e.err.(*indeterminateError); ok {
		cause = ie.err
	}
	return "not acquired; an unanswered attempt was undone: " + cause.Error()
}

// Unwrap returns the cause beneath the indeterminate wrapper, or nothing if
// the backend marked the outcome unknown in a way of its own.
func (e *undoneError) Unwrap() error {
	if ie, ok := e.err.(*indeterminateError); ok {
		return ie.err
	}
	return nil
}

// opError wraps a backend error with the operation and key:
// lease: renew "billing/nightly": <cause>.
type opError struct {
	op  string
	key string
	err error
}

func (e *opError) Error() string { return fmt.Sprintf("lease: %s %q: %v", e.op, e.key, e.err) }
func (e *opError) Unwrap() error { return e.err }

// wrapOp wraps err with the operation and key, unless err is one of this
// package's typed errors, which already name the key.
func wrapOp(op, key string, err error) error {
	switch err.(type) {
	case nil:
		return nil
	case *NotAcquiredError, *LostError:
		return err
	}
	return &opError{op: op, key: key, err: err}
}
