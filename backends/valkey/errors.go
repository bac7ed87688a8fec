package valkey

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/lease"
)

// classify turns an error from valkey-go into an error that follows the
// rules of lease.Backend, naming the operation op:
//
//   - a reply error from the server means the server refused the command
//     and did not apply it (the scripts check everything that can fail
//     before their first write), so it is returned as a plain error; a
//     missing ACL permission gets a message saying what to grant;
//   - a connection that could not be opened means nothing was sent, so it is
//     a plain error too;
//   - anything else (a connection lost after writing, a timeout, a context
//     that ended while waiting for the reply) may have been applied and
//     matches lease.ErrIndeterminate.
//
// It never sees the nonce: server errors quote the script, not its
// arguments, and transport errors name addresses.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	if verr, ok := valkey.IsValkeyErr(err); ok {
		msg := verr.Error()
		switch {
		case strings.HasPrefix(msg, "NOPERM"), strings.Contains(msg, "ACL failure in script"):
			return fmt.Errorf("leasevalkey: %s: the Valkey user lacks a permission the lease scripts need (see the package documentation for the ACL rules): %w", op, err)
		case strings.HasPrefix(msg, "WRONGTYPE"), strings.Contains(msg, "WRONGTYPE"):
			return fmt.Errorf("leasevalkey: %s: the lease record is not a hash; another program writes under this Prefix: %w", op, err)
		}
		return fmt.Errorf("leasevalkey: %s: refused by the server, not applied: %w", op, err)
	}
	if notSent(err) {
		return fmt.Errorf("leasevalkey: %s: could not connect, not sent: %w", op, err)
	}
	return lease.Indeterminate(fmt.Errorf("leasevalkey: %s: %w", op, err))
}

// notSent reports whether err proves that the request never left this
// process: the connection could not be dialled.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// beforeSend returns the error for a call whose context ended before the
// request was handed to valkey-go: nothing was sent.
func beforeSend(ctx context.Context, op string) error {
	return fmt.Errorf("leasevalkey: %s: not sent: %w", op, context.Cause(ctx))
}
