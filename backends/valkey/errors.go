package valkey

import (
	"context"
	"fmt"

	"github.com/golib/lease/internal/applied"
	"github.com/golib/lease/internal/valkeyplumbing"
	"github.com/golib/lease/lease"
)

// classify turns an error from valkey-go into an error that follows the
// rules of lease.Backend, naming the operation op. Whether the command was
// applied is valkeyplumbing.Classify's answer, shared with fence, cache and
// leasequeue: a reply error (the scripts check everything that can fail
// before their first write) or a connection that could not be opened is a
// plain error, and one that no retry cures (valkeyplumbing.Misconfigured)
// matches lease.ErrMisconfigured; anything else may have been applied and
// matches lease.ErrIndeterminate.
//
// It never sees the nonce: server errors quote the script, not its
// arguments, and transport errors name addresses.
func classify(op string, err error) error {
	switch valkeyplumbing.Classify(err) {
	case applied.Yes:
		return nil
	case applied.Unknown:
		return lease.Indeterminate(fmt.Errorf("leasevalkey: %s: %w", op, err))
	}
	switch {
	case valkeyplumbing.LoginRefused(err):
		return lease.Misconfigured(fmt.Errorf("leasevalkey: %s: the server refused the client's login (configuration: check the user name and password; a password changed since the client connected takes effect on its next connection): %w", op, err))
	case valkeyplumbing.NoPermission(err):
		return lease.Misconfigured(fmt.Errorf("leasevalkey: %s: the Valkey user lacks a permission the lease scripts need (configuration: see the package documentation for the ACL rules): %w", op, err))
	case valkeyplumbing.WrongType(err):
		return lease.Misconfigured(fmt.Errorf("leasevalkey: %s: the lease record is not a hash; another program writes under this Prefix (configuration: give the Store a prefix of its own): %w", op, err))
	case valkeyplumbing.UnknownCommand(err):
		return lease.Misconfigured(fmt.Errorf("leasevalkey: %s: the server does not know a command the Store sends (configuration: EVAL, EVALSHA or SCRIPT renamed or disabled, or not a Valkey or Redis server): %w", op, err))
	case valkeyplumbing.Refused(err):
		return fmt.Errorf("leasevalkey: %s: refused by the server, not applied: %w", op, err)
	}
	return fmt.Errorf("leasevalkey: %s: could not connect, not sent: %w", op, err)
}

// beforeSend returns the error for a call whose context ended before the
// request was handed to valkey-go: nothing was sent.
func beforeSend(ctx context.Context, op string) error {
	return fmt.Errorf("leasevalkey: %s: not sent: %w", op, context.Cause(ctx))
}
