package valkey

import (
	_ "embed"
	"strings"

	"github.com/golib/lease/lease"

	valkey "github.com/valkey-io/valkey-go"
)

// The scripts, one per operation. Each of acquire, renew, release and
// inspect touches exactly one key, the lease record, which it gets as
// KEYS[1]; those of semaphores and sets touch the records of the permits
// or keys, all in one hash slot. lua/record.lua describes the record's
// fields.
var (
	//go:embed lua/record.lua
	recordLua string
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/renew.lua
	renewLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/inspect.lua
	inspectLua string
	//go:embed lua/acquire_permit.lua
	acquirePermitLua string
	//go:embed lua/acquire_set.lua
	acquireSetLua string
	//go:embed lua/renew_set.lua
	renewSetLua string
	//go:embed lua/release_set.lua
	releaseSetLua string
)

// withRecord returns the script src with lua/record.lua, the record's
// helpers, in front of its body, after its first line (the "#!lua"
// shebang, which Valkey requires first). The scripts that grant, extend
// or end leases share those helpers rather than copies of them.
func withRecord(src string) string {
	first, body, _ := strings.Cut(src, "\n")
	return first + "\n" + recordLua + body
}

// Scripts are loaded with SCRIPT LOAD, so the server computes their hash
// (no SHA-1 in this process), then run with EVALSHA. The mutating ones are
// deliberately not NewLuaScriptRetryable: valkey-go must not resend a script
// that may already have been applied.
var (
	acquireScript       = valkey.NewLuaScript(withRecord(acquireLua), valkey.WithLoadSHA1(true))
	renewScript         = valkey.NewLuaScript(withRecord(renewLua), valkey.WithLoadSHA1(true))
	releaseScript       = valkey.NewLuaScript(withRecord(releaseLua), valkey.WithLoadSHA1(true))
	inspectScript       = valkey.NewLuaScriptReadOnly(inspectLua, valkey.WithLoadSHA1(true))
	acquirePermitScript = valkey.NewLuaScript(withRecord(acquirePermitLua), valkey.WithLoadSHA1(true))
	acquireSetScript    = valkey.NewLuaScript(withRecord(acquireSetLua), valkey.WithLoadSHA1(true))
	renewSetScript      = valkey.NewLuaScript(withRecord(renewSetLua), valkey.WithLoadSHA1(true))
	releaseSetScript    = valkey.NewLuaScript(withRecord(releaseSetLua), valkey.WithLoadSHA1(true))
)

// Outcomes returned by the renew and release scripts.
const (
	outcomeDone          = 1
	outcomeExpired       = 2
	outcomeSuperseded    = 3
	outcomeForceReleased = 4
	outcomeNoRecord      = 5
)

// lostReasons maps the outcomes of the renew, release and forcerelease
// scripts that end in a *lease.LostError to its reason.
var lostReasons = map[int64]lease.LostReason{
	outcomeExpired:       lease.Expired,
	outcomeSuperseded:    lease.Superseded,
	outcomeForceReleased: lease.ForceReleased,
	outcomeNoRecord:      lease.RecordLost,
}
