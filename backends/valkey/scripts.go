package valkey

import (
	_ "embed"
	"strings"

	"github.com/golib/lease/lease"

	valkey "github.com/valkey-io/valkey-go"
)

// The scripts, one per operation. Each of acquire, renew, release,
// hand-off and inspect touches exactly one key, the lease record, which it gets as
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
	//go:embed lua/handoff.lua
	handOffLua string
)

// withRecord returns the script src with the helpers of lua/record.lua
// that it calls in front of its body, after its first line (the "#!lua"
// shebang, which Valkey requires first). The scripts that grant, extend
// or end leases share those helpers rather than copies of them. Each
// helper is a local function, which the server creates anew at every
// call of a script, so a script gets only those it calls (and those they
// call): fewer closures, less server time per call.
func withRecord(src string) string {
	first, body, _ := strings.Cut(src, "\n")
	header, helpers := recordHelpers(recordLua)
	used := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, h := range helpers {
			if used[h.name] || !strings.Contains(body, h.name+"(") && !usedBy(h.name, helpers, used) {
				continue
			}
			used[h.name], changed = true, true
		}
	}
	var b strings.Builder
	b.WriteString(first + "\n" + header)
	for _, h := range helpers {
		if used[h.name] {
			b.WriteString(h.text)
		}
	}
	b.WriteString(body)
	return b.String()
}

// usedBy reports whether one of the helpers already in used calls name.
func usedBy(name string, helpers []recordHelper, used map[string]bool) bool {
	for _, h := range helpers {
		if used[h.name] && strings.Contains(h.text, name+"(") {
			return true
		}
	}
	return false
}

// A recordHelper is one local function of lua/record.lua: its name and
// its text, with the comment above it.
type recordHelper struct{ name, text string }

// recordHelpers splits the text of lua/record.lua into its header, up to
// the blank line above its first helper, and the helpers, each a "local
// function" up to the first line "end" after it, with the lines (its
// comment) since the previous helper.
func recordHelpers(src string) (header string, helpers []recordHelper) {
	var text strings.Builder
	name := ""
	for line := range strings.Lines(src) {
		if name == "" && strings.HasPrefix(line, "local function ") {
			name, _, _ = strings.Cut(strings.TrimPrefix(line, "local function "), "(")
			if helpers == nil {
				// The header ends at the last blank line before the first helper.
				t := text.String()
				i := strings.LastIndex(t, "\n\n") + 2
				header = t[:i]
				text.Reset()
				text.WriteString(t[i:])
			}
		}
		text.WriteString(line)
		if name != "" && strings.TrimRight(line, "\n") == "end" {
			helpers = append(helpers, recordHelper{name, text.String()})
			name = ""
			text.Reset()
		}
	}
	return header, helpers
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
	handOffScript       = valkey.NewLuaScript(withRecord(handOffLua), valkey.WithLoadSHA1(true))
)

// Outcomes returned by the renew, release and hand-off scripts.
const (
	outcomeDone          = 1
	outcomeExpired       = 2
	outcomeSuperseded    = 3
	outcomeForceReleased = 4
	outcomeNoRecord      = 5
	outcomeHandedOff     = 6
)

// lostReasons maps the outcomes of the renew, release and forcerelease
// scripts that end in a *lease.LostError to its reason.
var lostReasons = map[int64]lease.LostReason{
	outcomeExpired:       lease.Expired,
	outcomeSuperseded:    lease.Superseded,
	outcomeForceReleased: lease.ForceReleased,
	outcomeNoRecord:      lease.RecordLost,
	outcomeHandedOff:     lease.HandedOff,
}
