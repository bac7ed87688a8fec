package cache

import (
	"errors"
	"fmt"

	"github.com/golib/lease/internal/applied"
	"github.com/golib/lease/internal/refused"
	"github.com/golib/lease/internal/valkeyplumbing"
	"github.com/golib/lease/lease"
)

// Sentinel errors. Test for them with [errors.Is]; the typed errors below
// carry the facts and match them.
var (
	// ErrInvalidated means a publication was refused because the entry was
	// invalidated after the publishing acquisition of the refresh lease
	// began: the value may have been computed from data older than the
	// invalidation. Nothing was written. The error is an
	// *InvalidatedError.
	ErrInvalidated = refused.ErrInvalidated

	// ErrWaitTimeout means Get waited Options.Wait for another process to
	// publish the value, and it did not.
	ErrWaitTimeout = errors.New("cache: timed out waiting for another refresh")
)

// A publication refused because the refresh lease no longer shows the
// publishing acquisition is reported as a *guard.NotCurrentError (matching
// guard.ErrNotCurrent), wrapped with the cache key.

// InvalidatedError reports a publication refused because the entry was
// invalidated since the publishing acquisition began. It matches
// ErrInvalidated.
type InvalidatedError struct {
	// Key is the cache key.
	Key string
	// Token is the token of the acquisition that tried to publish.
	Token lease.Token
	// Mark is the entry's invalidation mark: acquisitions with a token up to
	// Mark may no longer publish.
	Mark lease.Token
}

func (e *InvalidatedError) Error() string {
	return fmt.Sprintf("cache: %q was invalidated after the refresh with token %d began (invalidated through token %d); nothing was published",
		e.Key, e.Token, e.Mark)
}

// Is reports whether target is ErrInvalidated.
func (e *InvalidatedError) Is(target error) bool { return target == ErrInvalidated }

// PanicError is the error of a Get whose load function panicked. Nothing
// was published, the refresh lease was released, and every caller waiting
// for that load gets this error.
type PanicError struct {
	// Key is the cache key.
	Key string
	// Value is what load panicked with.
	Value any
	// Stack is the stack of the panicking goroutine.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("cache: load %q panicked: %v", e.Key, e.Value)
}

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// opError wraps an error with the operation and the cache key:
// cache: publish "page:/home": <cause>.
type opError struct {
	op  string
	key string
	err error
}

func (e *opError) Error() string { return fmt.Sprintf("cache: %s %q: %v", e.op, e.key, e.err) }
func (e *opError) Unwrap() error { return e.err }

// wrapOp wraps err with the operation and key, unless it is nil or already
// an error of this package that names the key.
func wrapOp(op, key string, err error) error {
	switch err.(type) {
	case nil:
		return nil
	case *opError, *InvalidatedError, *PanicError:
		return err
	}
	return &opError{op: op, key: key, err: err}
}

// classify turns an error of a mutating command from valkey-go into an
// error saying whether the command may have been applied, by
// valkeyplumbing.Classify: a reply error means the server refused the script
// before its first write (the scripts check everything that can fail
// first, and a script the server refuses for lack of memory does not
// start), so nothing changed; so does a connection that could not be
// opened; anything else may have been applied and matches
// lease.ErrIndeterminate.
func classify(err error) error {
	switch valkeyplumbing.Classify(err) {
	case applied.Yes:
		return nil
	case applied.Unknown:
		return lease.Indeterminate(err)
	}
	switch {
	case valkeyplumbing.NoPermission(err):
		return lease.Misconfigured(fmt.Errorf("the Valkey user lacks a permission the cache scripts need (see the package documentation): %w", err))
	case valkeyplumbing.WrongType(err):
		return lease.Misconfigured(fmt.Errorf("an entry's key holds another type of value; another program writes under this Prefix: %w", err))
	case valkeyplumbing.Misconfigured(err):
		return lease.Misconfigured(fmt.Errorf("refused by the server, not applied (configuration): %w", err))
	case valkeyplumbing.Refused(err):
		return fmt.Errorf("refused by the server, not applied: %w", err)
	}
	return fmt.Errorf("could not connect, not sent: %w", err)
}
