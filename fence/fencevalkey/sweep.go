package fencevalkey

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/valkeyplumbing"
	"github.com/golib/lease/lease"
)

//go:embed lua/retire.lua
var retireLua string

// retireScript is lua/retire.lua behind the token helpers; like
// fenceScript it is never retried by valkey-go on its own.
var retireScript = valkey.NewLuaScript(valkeyplumbing.TokenScript(retireLua, maxLeadMicros), valkey.WithLoadSHA1(true))

// Sweep retires one page of the fences that have not advanced for the
// retention (Options.Retention), on the server's clock: for each, one
// script in the fence key's hash slot raises the floor of its lease key in
// that slot (FloorKey) to its token and deletes the fence key. From then
// on every fenced write of that lease key in that slot with a lower token
// is refused with a *StaleError (Floor true), so a stale writer to a
// retired resource is still refused; a resource retired may be fenced
// again, by its lease key or by another. See package fence's documentation,
// "Retirement", for why this is safe.
//
// A page is one SCAN (COUNT o.Limit, MATCH on the fence keys' names, TYPE
// hash) on one primary, then one pipelined read of the fence keys found
// and one pipelined script per fence key; on a cluster the primaries are
// walked one after the other, and a walk interrupted by a failover or a
// resharding fails and must start again. SweepPage.Removed names the
// resources retired (with o.DryRun, those that would be: a dry run writes
// nothing). Pages may be empty while Next is not "". A fence key written
// by a version of this package that did not record when it advanced (no
// field "at") starts its retention when a sweep first sees it. With a
// retention of lease.KeepForever Sweep retires nothing and returns an
// empty page.
//
// Every retirement checks its own conditions atomically, so concurrent
// sweeps, from any number of processes, are safe. The user needs SCAN and
// ROLE besides the commands of fenced writes (HMGET, HSET, DEL, TIME and
// the script commands).
func (v *Fence) Sweep(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
	if o.Limit < 1 {
		return lease.SweepPage{}, invalid("Sweep: limit %d is not positive", o.Limit)
	}
	if v.retention == lease.KeepForever {
		return lease.SweepPage{}, nil
	}
	match := valkeyplumbing.GlobEscape(v.prefix) + "{*}"
	names, next, err := valkeyplumbing.ScanPrimaries(ctx, v.client, o.Cursor, match, "hash", o.Limit)
	if err != nil {
		return lease.SweepPage{}, v.sweepError(err)
	}
	var fks []string
	for _, name := range names {
		if v.isFenceKey(name) && !slices.Contains(fks, name) {
			fks = append(fks, name)
		}
	}
	if len(fks) == 0 {
		return lease.SweepPage{Next: next}, nil
	}
	reads := make(valkey.Commands, len(fks))
	for i, fk := range fks {
		reads[i] = v.client.B().Hmget().Key(fk).Field("key").Build()
	}
	execs := make([]valkey.LuaExec, 0, len(fks))
	var candidates []string
	for i, res := range v.client.DoMulti(ctx, reads...) {
		vals, err := res.ToArray()
		if err != nil {
			return lease.SweepPage{}, v.sweepError(err)
		}
		key, _ := vals[0].ToString()
		if key == "" {
			continue // gone since SCAN
		}
		dry := "0"
		if o.DryRun {
			dry = "1"
		}
		execs = append(execs, valkey.LuaExec{
			Keys: []string{fks[i], v.floorKey(fks[i], key)},
			Args: []string{key, strconv.FormatInt(v.retention.Microseconds(), 10), dry},
		})
		candidates = append(candidates, fks[i])
	}
	var (
		removed []string
		first   error
	)
	for i, res := range retireScript.ExecMulti(ctx, v.client, execs...) {
		n, err := res.AsInt64()
		switch {
		case err != nil && first == nil:
			first = v.sweepError(err)
		case err == nil && n == 1:
			removed = append(removed, v.resourceOf(candidates[i]))
		}
	}
	if first != nil {
		return lease.SweepPage{Removed: removed}, first
	}
	return lease.SweepPage{Removed: removed, Next: next}, nil
}

// resourceOf returns the resource of fence key fk.
func (v *Fence) resourceOf(fk string) string {
	return strings.TrimSuffix(strings.TrimPrefix(fk, v.prefix+"{"), "}")
}

// sweepError explains an error of a sweep.
func (v *Fence) sweepError(err error) error {
	return fmt.Errorf("fence: sweep of the fence keys under %q: %w", v.prefix, err)
}
