package cache

import (
	_ "embed"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/valkeyplumbing"
)

// The scripts: publish.lua describes the keys they touch. All mutate, so
// they are NewLuaScript, not the Retryable variant, as in the lease
// backend: valkey-go does not resend them behind our back, and a request
// whose outcome is unknown is reported as such. They are loaded with
// SCRIPT LOAD, so that the server computes their hash, then run with
// EVALSHA.
var (
	//go:embed lua/publish.lua
	publishLua string
	//go:embed lua/invalidate.lua
	invalidateLua string

	//go:embed lua/sweep.lua
	sweepLua string

	publishScript    = valkey.NewLuaScript(publishLua, valkey.WithLoadSHA1(true))
	invalidateScript = valkey.NewLuaScript(invalidateLua, valkey.WithLoadSHA1(true))
	sweepScript      = valkey.NewLuaScript(sweepLua, valkey.WithLoadSHA1(true))
	// sweepDryScript is sweep.lua flagged no-writes, run with EVALSHA_RO:
	// a dry run writes nothing, even where a script that may write is
	// refused (a full server).
	sweepDryScript = valkey.NewLuaScriptReadOnly(valkeyplumbing.NoWrites(sweepLua), valkey.WithLoadSHA1(true))
)

// Outcomes returned by the publish script.
const (
	publishDone        = 0
	publishNotCurrent  = 1
	publishInvalidated = 2
)
