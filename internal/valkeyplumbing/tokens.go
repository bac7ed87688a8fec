package valkeyplumbing

import (
	_ "embed"
	"strconv"
	"strings"
)

//go:embed lua/tokens.lua
var tokensLua string

// TokenScript returns the Lua script src with the token helpers of
// lua/tokens.lua in front of it: a local table tokens whose functions
// compare and add fencing tokens as canonical decimal strings, exactly for
// every uint64 (a Lua number is a double, exact only up to 2^53), and
// compute the largest plausible token: the server's clock in microseconds
// plus leadMicros (fence.MaxTokenLead in microseconds; a count of
// microseconds, not a time.Duration, so that the tests can raise it past
// 2^63 nanoseconds and reach the arithmetic with tokens near 2^64). Every
// script of this module that compares or advances a token uses them, so
// none does token arithmetic in doubles.
//
// A first line of src that starts with "#!" (the shebang that declares
// flags) stays first, as Valkey requires.
func TokenScript(src string, leadMicros int64) string {
	head := "local tokens = {LEAD = '" + strconv.FormatInt(leadMicros, 10) + "'}\n" + tokensLua
	if first, rest, ok := strings.Cut(src, "\n"); ok && strings.HasPrefix(first, "#!") {
		return first + "\n" + head + rest
	}
	return head + src
}

// NoWrites returns the Lua script src, whose first line is the shebang
// "#!lua" without flags, flagged no-writes: the read-only twin of a
// mutating script, for its dry run. The server runs it with EVALSHA_RO
// (valkey.NewLuaScriptReadOnly) even where a script that may write is
// refused (a full server, a read-only replica), and refuses any write it
// attempts.
func NoWrites(src string) string {
	body, ok := strings.CutPrefix(src, "#!lua\n")
	if !ok {
		panic("valkeyplumbing: a script to flag no-writes does not start with #!lua")
	}
	return "#!lua flags=no-writes\n" + body
}
