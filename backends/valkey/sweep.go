package valkey

import (
	"context"
	_ "embed"
	"fmt"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/valkeyplumbing"
	"github.com/golib/lease/lease"
)

var _ lease.Sweeper = (*Store)(nil)

//go:embed lua/sweep.lua
var sweepLua string

// sweepScript removes a record; like the other mutating scripts, it is
// not retryable. sweepDryScript is the same script flagged no-writes, run
// with EVALSHA_RO: a dry run writes nothing, even where a script that
// could write would be refused (a full server).
var (
	sweepScript    = valkey.NewLuaScript(sweepLua, valkey.WithLoadSHA1(true))
	sweepDryScript = valkey.NewLuaScriptReadOnly(valkeyplumbing.NoWrites(sweepLua), valkey.WithLoadSHA1(true))
)

// Sweep implements lease.Sweeper: it removes the records of leases that
// expired more than the Store's retention ago (see Options.Retention).
// It walks the records as List does, one SCAN of o.Limit on one primary
// per page, with the same cursors and the same rules, and runs a script
// (lua/sweep.lua) on each record found, pipelined, that decides on the
// server's clock and removes the record in one atomic step: a record
// held, or acquired again since the SCAN, is never removed.
//
// Released and force-released records end by themselves, through the TTL
// that Release and ForceRelease give them; Sweep gives one to such a
// record left without a TTL by a version of this package that kept
// records forever. It removes, and reports, the records of leases that
// expired without a release, as when their holders died. With
// lease.KeepForever it does nothing and returns at once.
//
// Sweep needs SCAN, ROLE (as List does) and DEL besides the commands the
// package documentation lists for every user.
func (s *Store) Sweep(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
	const op = "sweep"
	if s.retention == lease.KeepForever {
		return lease.SweepPage{}, nil
	}
	keys, next, err := s.scanRecords(ctx, op, "", o.Cursor, o.Limit)
	if err != nil || len(keys) == 0 {
		return lease.SweepPage{Next: next}, err
	}
	script, dry := sweepScript, "0"
	if o.DryRun {
		script, dry = sweepDryScript, "1"
	}
	execs := make([]valkey.LuaExec, len(keys))
	for i, k := range keys {
		execs[i] = valkey.LuaExec{Keys: []string{recordKey(s.prefix, k)}, Args: []string{s.retentionArg, dry}}
	}
	var removed []string
	var firstErr error
	for i, res := range script.ExecMulti(ctx, s.client, execs...) {
		n, err := res.AsInt64()
		switch {
		case err == nil:
			if n == 1 {
				removed = append(removed, keys[i])
			}
		case valkeyplumbing.WrongType(err):
			// No longer a hash since the SCAN: not a lease record.
		case firstErr == nil:
			firstErr = classify(fmt.Sprintf("%s (record of %q)", op, keys[i]), err)
		}
	}
	if firstErr != nil {
		return lease.SweepPage{Removed: removed}, firstErr
	}
	return lease.SweepPage{Removed: removed, Next: next}, nil
}
