package valkeyplumbing

import (
	"errors"
	"net"
	"strings"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/applied"
)

// Classify says whether the request that returned err was applied. It is
// the one answer to that question for every package of this module that
// talks to Valkey:
//
//   - nil: [applied.Yes];
//   - an error reply from the server (a *valkey.ValkeyError: WRONGTYPE,
//     NOPERM, OOM, READONLY, an error raised by a script before its first
//     write, ...): [applied.No]. Valkey does not roll back a script that
//     fails after a write, so this holds for a script only if it checks
//     everything that can fail before it writes, as the scripts of this
//     module do;
//   - a dial or DNS error (no connection could be opened): [applied.No];
//   - anything else (a timeout, a reset after the request was written, a
//     context that ended while waiting for the reply, a closing client):
//     [applied.Unknown]. So is valkey.Nil, which a caller expecting a
//     value gets from a reply it cannot read.
//
// valkey-go returns the bare context error both when the context had ended
// before the request was queued and when it ended while waiting for the
// reply, so a context error is [applied.Unknown]. A caller that checks its
// context before the call knows more, and says so itself.
func Classify(err error) applied.Outcome {
	if err == nil {
		return applied.Yes
	}
	if _, ok := replyError(err); ok {
		return applied.No
	}
	var op *net.OpError
	var dns *net.DNSError
	if errors.As(err, &op) && op.Op == "dial" || errors.As(err, &dns) {
		return applied.No
	}
	return applied.Unknown
}

// replyError returns the server's error reply in err's chain.
func replyError(err error) (*valkey.ValkeyError, bool) {
	var verr *valkey.ValkeyError
	if errors.As(err, &verr) && !valkey.IsValkeyNil(verr) {
		return verr, true
	}
	return nil, false
}

// Refused reports whether err is an error reply from the server: it refused
// the command, which was not applied.
func Refused(err error) bool {
	_, ok := replyError(err)
	return ok
}

// NoPermission reports whether err is the server refusing a command, or a
// command called from a script, that the user's ACL does not allow.
func NoPermission(err error) bool {
	verr, ok := replyError(err)
	if !ok {
		return false
	}
	msg := verr.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "ACL failure in script")
}

// WrongType reports whether err is the server refusing a command on a key
// that holds another type of value: another program writes under the key.
func WrongType(err error) bool {
	verr, ok := replyError(err)
	return ok && strings.Contains(verr.Error(), "WRONGTYPE")
}

// LoginRefused reports whether err is the server refusing the client's
// login (WRONGPASS: a wrong password, an unknown or disabled user), or a
// command on a connection that never logged in (NOAUTH). valkey-go logs in
// again on every new connection, so a password changed after the client
// connected shows up here on the next command.
func LoginRefused(err error) bool {
	verr, ok := replyError(err)
	if !ok {
		return false
	}
	msg := verr.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH")
}

// UnknownCommand reports whether err is the server refusing a command it
// does not know: renamed or disabled (rename-command), or a server, or a
// proxy in front of it, that is not Valkey or Redis.
func UnknownCommand(err error) bool {
	verr, ok := replyError(err)
	return ok && strings.HasPrefix(verr.Error(), "ERR unknown command")
}

// Misconfigured reports whether err is a refusal that no retry cures: a
// refused login, a missing ACL permission, a record of another type under
// the key (another program writes under the prefix), an unknown command.
// Refusals that pass (OOM, READONLY during a failover, BUSY, LOADING,
// MISCONF) are not.
func Misconfigured(err error) bool {
	return LoginRefused(err) || NoPermission(err) || WrongType(err) || UnknownCommand(err)
}

// NotRESP reports whether err is valkey-go failing to read a reply because
// the peer does not speak RESP: the address is another service's (an HTTP
// server, PostgreSQL, ...). valkey-go says so in plain text errors only.
func NotRESP(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"received unknown message type: ", "received unexpected number byte: ", "received unexpected simple string message ending without CRLF"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
