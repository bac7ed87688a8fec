package valkey

import (
	_ "embed"

	"github.com/golib/lease/lease"

	valkey "github.com/valkey-io/valkey-go"
)

// The scripts, one per operation. Each touches exactly one key, the lease
// record, which it gets as KEYS[1]; lua/acquire.lua describes the record's
// fields.
var (
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/renew.lua
	renewLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/inspect.lua
	inspectLua string
)

// Scripts are loaded with SCRIPT LOAD, so the server computes their hash
// (no SHA-1 in this process), then run with EVALSHA. The mutating ones are
// deliberately not NewLuaScriptRetryable: valkey-go must not resend a script
// that may already have been applied.
var (
	acquireScript = valkey.NewLuaScript(acquireLua, valkey.WithLoadSHA1(true))
	renewScript   = valkey.NewLuaScript(renewLua, valkey.WithLoadSHA1(true))
	releaseScript = valkey.NewLuaScript(releaseLua, valkey.WithLoadSHA1(true))
	inspectScript = valkey.NewLuaScriptReadOnly(inspectLua, valkey.WithLoadSHA1(true))
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
