package fencevalkey

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/applied"
	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/internal/valkeyplumbing"
	"github.com/golib/lease/lease"
)

// DefaultPrefix starts the name of every fence key when Options
// leave Prefix empty.
const DefaultPrefix = "fence:"

//go:embed lua/fence.lua
var fenceLua string

// fenceSource is lua/fence.lua behind the token helpers of valkeyplumbing,
// which bound tokens by MaxTokenLead.
var fenceSource = valkeyplumbing.TokenScript(fenceLua, maxLeadMicros)

// fenceScript is loaded with SCRIPT LOAD, so the server computes its hash,
// then run with EVALSHA (falling back to EVAL once after the server forgot
// it). It is deliberately not NewLuaScriptRetryable: valkey-go must not
// resend a write that may already have been applied.
var fenceScript = valkey.NewLuaScript(fenceSource, valkey.WithLoadSHA1(true))

// Options configure a Valkey fence. The zero value is valid.
type Options struct {
	// Prefix starts the name of every fence key and floor key. Default
	// DefaultPrefix ("fence:"). It must not contain '{' or '}'.
	Prefix string
	// Retention is how long a fence that has not advanced (accepted a
	// higher token, or a first one) is kept before Sweep retires it:
	// deletes its fence key and raises the floor of its lease key in the
	// resource's hash slot to its token (see package fence's documentation,
	// "Retirement"). Safety holds for any retention; the retention only
	// decides how many fence keys the server keeps. Default
	// lease.DefaultRetention; lease.KeepForever retires nothing.
	Retention time.Duration
}

// Fence runs fenced writes on a Valkey server or cluster: each call to
// Do is one Lua script that checks and advances the resource's fence and
// applies the commands, atomically, in one round trip.
//
// A resource's fence key is Prefix + "{" + resource + "}" (see FenceKey),
// a hash that never expires and is deleted only when Sweep retires it. The
// braces are a hash tag: every key a fenced write touches must be in the
// same hash slot, which the keys are when they carry the same tag, as in
// "invoice:{billing/2026-11}:total" for the resource "billing/2026-11".
// Do checks that before sending anything. Beside the fence keys, in each
// hash slot, are the floors of the lease keys whose fences in that slot
// were retired (see FloorKey).
//
// Fence is safe for concurrent use; it never closes the client.
type Fence struct {
	client    valkey.Client
	prefix    string
	retention time.Duration
}

// New returns a Valkey fence on client (standalone, sentinel or
// cluster). It fails if client is nil or o is invalid; it does not talk to
// the server.
func New(client valkey.Client, o Options) (*Fence, error) {
	if client == nil {
		return nil, invalid("New: nil client")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		return nil, invalid("Options.Prefix %q must not contain '{' or '}'", o.Prefix)
	}
	retention, err := checkRetention(o.Retention)
	if err != nil {
		return nil, err
	}
	return &Fence{client: client, prefix: o.Prefix, retention: retention}, nil
}

// FenceKey returns the name of the fence key of resource:
// Prefix + "{" + resource + "}". Keys written under the fence must hash to
// its slot; the simplest way is to put "{" + resource + "}" in them.
func (v *Fence) FenceKey(resource string) string { return keyspace.Name(v.prefix, resource, "") }

// floorSuffix follows the hash tag in the name of a floor key, before the
// escaped lease key.
const floorSuffix = ":floor:"

// FloorKey returns the name of the floor key of leaseKey in the hash slot
// of resource's fence key: Prefix + "{" + tag + "}:floor:" + the lease
// key escaped as internal/keyspace escapes names ('%', '{', '}' and '/'
// as %25, %7B, %7D and %2F), where tag is a string of one to three
// letters and digits whose hash slot is that slot. It is a hash whose
// field token holds the highest token of leaseKey among the fences
// retired in that slot; every fenced write of leaseKey in that slot with a
// lower token is refused. Floor keys never expire and are never deleted:
// there is at most one per lease key and hash slot.
func (v *Fence) FloorKey(resource, leaseKey string) string {
	return v.floorKey(v.FenceKey(resource), leaseKey)
}

// floorKey returns the floor key of leaseKey in the slot of fence key fk.
func (v *Fence) floorKey(fk, leaseKey string) string {
	return keyspace.Name(v.prefix, slotTag(keySlot(fk)), floorSuffix+keyspace.Escape(leaseKey))
}

// isFenceKey reports whether key is the fence key of some resource:
// Prefix, '{', a resource without braces, '}'.
func (v *Fence) isFenceKey(key string) bool {
	r, ok := strings.CutPrefix(key, v.prefix+"{")
	if !ok {
		return false
	}
	r, ok = strings.CutSuffix(r, "}")
	return ok && r != "" && !strings.ContainsAny(r, "{}")
}

// isFloorKey reports whether key has the shape of a floor key: Prefix,
// '{', a tag without braces, "}:floor:", anything.
func (v *Fence) isFloorKey(key string) bool {
	r, ok := strings.CutPrefix(key, v.prefix+"{")
	if !ok {
		return false
	}
	tag, rest, ok := strings.Cut(r, "}")
	return ok && tag != "" && !strings.Contains(tag, "{") && strings.HasPrefix(rest, floorSuffix)
}

// Claim advances the fence of resource to snap, writing nothing else: from
// then on, writes with older tokens are refused even if the new holder has
// not written yet. It is Do without commands.
func (v *Fence) Claim(ctx context.Context, snap lease.Snapshot, resource string) error {
	_, err := v.Do(ctx, snap, resource, nil...)
	return err
}

// Do applies cmds, in order, if the fence of resource admits snap (see
// Mark.Admit), and advances the fence; it returns one reply per command.
//
// Everything happens in one script, in one round trip: no other client
// sees the fence checked but the commands not applied, or some commands
// applied and not others. Valkey does not roll a script back, so before
// writing anything the script checks that every command will succeed,
// whatever the keys held before: no WRONGTYPE, INCRBY only on an integer
// that cannot overflow, XADD only on a stream that has IDs left. It
// simulates the group in order (a DEL or SET earlier in the group changes
// what a later command sees) and refuses the whole group if any command
// would fail, so the group is applied entirely or not at all. Replicas and
// the append-only file receive the fence and the commands together.
//
// If the fence refuses snap, nothing is written and Do returns a
// *StaleError or a *ForeignLeaseError; a token more than MaxTokenLead ahead
// of the server's clock writes nothing and returns an
// *ImplausibleTokenError. Before any I/O Do checks snap, the
// resource name (ValidateResource, and no '{' or '}'), and that every key
// is in the hash slot of the fence key and is not the fence key; it
// returns an error wrapping ErrInvalid otherwise. A reply error from the
// server means nothing was written. Should a command fail although the
// script's checks passed (an ACL user without the right to run it, on its
// key), the fence and the commands before it stay applied, and the error
// says so; give the user every allowed command on its keys. A transport error after the request
// was sent matches lease.ErrIndeterminate: the write may have been applied.
func (v *Fence) Do(ctx context.Context, snap lease.Snapshot, resource string, cmds ...Command) ([]valkey.ValkeyMessage, error) {
	keys, args, err := v.encode(snap, resource, cmds)
	if err != nil {
		return nil, err
	}
	return v.exec(ctx, snap, resource, keys, args)
}

// DoAt is Do with a fence key that the caller names instead of
// FenceKey(resource): for a package whose fences must live in the hash
// slot of its own keys (leasequeue keeps each item's fence next to the
// queue's keys, so that one script claims an item and writes its fence).
// The fence key must be a hash in the format of the fence script (fields
// key, token and owner, see FenceKey) that only fenced writes and its own
// package write; resource only names the write in errors. The floor of the
// snapshot's lease key is read from its floor key in fenceKey's slot, named
// as FloorKey names it; Sweep retires only the fence keys it names itself,
// so a fence key of DoAt never retires and that floor is only raised by
// fences of the same lease in the same slot. Every command's key must be
// in the hash slot of fenceKey and must be neither fenceKey nor a floor
// key; the errors are those of Do.
func (v *Fence) DoAt(ctx context.Context, snap lease.Snapshot, resource, fenceKey string, cmds ...Command) ([]valkey.ValkeyMessage, error) {
	if err := fence.ValidateSnapshot(snap); err != nil {
		return nil, err
	}
	if fenceKey == "" {
		return nil, invalid("resource %q: empty fence key", resource)
	}
	keys, args, err := v.encodeAt(snap, resource, fenceKey, cmds)
	if err != nil {
		return nil, err
	}
	return v.exec(ctx, snap, resource, keys, args)
}

// exec runs the fence script with keys and args, checked by encode or
// encodeAt, and reads its outcome.
func (v *Fence) exec(ctx context.Context, snap lease.Snapshot, resource string, keys, args []string) ([]valkey.ValkeyMessage, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("fence: resource %q: not sent: %w", resource, context.Cause(ctx))
	}
	msg, err := fenceScript.Exec(ctx, v.client, keys, args).ToMessage()
	if err != nil {
		return nil, classify(resource, err)
	}
	return outcome(resource, snap, msg)
}

// encode checks a fenced write and returns the script's KEYS and ARGV.
func (v *Fence) encode(snap lease.Snapshot, resource string, cmds []Command) (keys, args []string, err error) {
	if err := fence.ValidateSnapshot(snap); err != nil {
		return nil, nil, err
	}
	if err := fence.ValidateResource(resource); err != nil {
		return nil, nil, err
	}
	if strings.ContainsAny(resource, "{}") {
		return nil, nil, invalid("Valkey resource %q must not contain '{' or '}': it is the hash tag of its keys", resource)
	}
	return v.encodeAt(snap, resource, v.FenceKey(resource), cmds)
}

// encodeAt checks the commands of a fenced write on the fence key fk, of
// a checked snapshot, and returns the script's KEYS (the fence key, the
// floor key of the snapshot's lease key in its slot, the data keys) and
// ARGV.
func (v *Fence) encodeAt(snap lease.Snapshot, resource, fk string, cmds []Command) (keys, args []string, err error) {
	slot := keySlot(fk)
	n := 4
	for _, c := range cmds {
		n += 3 + len(c.args)
	}
	keys = make([]string, 2, 2+len(cmds))
	keys[0], keys[1] = fk, v.floorKey(fk, snap.Key)
	args = make([]string, 0, n)
	args = append(args, snap.Key, snap.Token.String(), snap.Owner, strconv.Itoa(len(cmds)))
	var index map[string]int // for large groups; small ones search keys
	if len(cmds) > 16 {
		index = make(map[string]int, len(cmds)+2)
		index[fk], index[keys[1]] = 1, 2
	}
	for i, c := range cmds {
		if err := c.check(); err != nil {
			return nil, nil, invalid("resource %q: command %d: %v", resource, i+1, err)
		}
		if c.key == fk {
			return nil, nil, invalid("resource %q: command %d: %s writes the fence key", resource, i+1, c)
		}
		if v.isFenceKey(c.key) {
			// Another resource's fence key in the same slot: a group must
			// never lower or remove a fence, its own or another's.
			return nil, nil, invalid("resource %q: command %d: %s writes a fence key", resource, i+1, c)
		}
		if v.isFloorKey(c.key) {
			// Nor a floor, of any lease key.
			return nil, nil, invalid("resource %q: command %d: %s writes a floor key", resource, i+1, c)
		}
		if s := keySlot(c.key); s != slot {
			return nil, nil, invalid("resource %q: command %d: key %q is in hash slot %d, not in slot %d of the fence key %q (put {%s} in the key)",
				resource, i+1, c.key, s, slot, fk, resource)
		}
		ki := 0 // the key's index in KEYS, from 1 as in Lua
		if index != nil {
			ki = index[c.key]
		} else {
			ki = slices.Index(keys, c.key) + 1
		}
		if ki == 0 {
			keys = append(keys, c.key)
			ki = len(keys)
			if index != nil {
				index[c.key] = ki
			}
		}
		args = append(args, c.name, strconv.Itoa(ki), strconv.Itoa(len(c.args)))
		args = append(args, c.args...)
	}
	return keys, args, nil
}

// outcome reads the script's reply.
func outcome(resource string, snap lease.Snapshot, msg valkey.ValkeyMessage) ([]valkey.ValkeyMessage, error) {
	arr, err := msg.ToArray()
	if err != nil || len(arr) == 0 {
		return nil, lease.Indeterminate(fmt.Errorf("fence: resource %q: unexpected reply %v", resource, msg))
	}
	code, _ := arr[0].AsInt64()
	if code == 1 && len(arr) == 2 {
		if arr[1].IsNil() { // no commands: Lua's empty table
			return nil, nil
		}
		replies, err := arr[1].ToArray()
		if err != nil {
			return nil, lease.Indeterminate(fmt.Errorf("fence: resource %q: unexpected reply %v", resource, msg))
		}
		return replies, nil
	}
	if code == 5 && len(arr) == 3 {
		c, _ := arr[1].AsInt64()
		msg, _ := arr[2].ToString()
		return nil, fmt.Errorf("fence: resource %q: command %d failed after the fence and the %d commands before it were applied (Valkey does not roll back): %s",
			resource, c, c-1, msg)
	}
	if code == 6 && len(arr) == 2 {
		floor, _ := arr[1].ToString()
		if n, err := strconv.ParseUint(floor, 10, 64); err == nil {
			return nil, &fence.StaleError{Resource: resource, Key: snap.Key, Token: snap.Token, Current: lease.Token(n), Floor: true}
		}
	}
	if code == 4 && len(arr) == 2 {
		largest, _ := arr[1].ToString()
		if n, err := strconv.ParseUint(largest, 10, 64); err == nil {
			return nil, &fence.ImplausibleTokenError{Resource: resource, Key: snap.Key, Token: snap.Token, Largest: lease.Token(n)}
		}
	}
	if (code == 2 || code == 3) && len(arr) == 3 {
		key, _ := arr[1].ToString()
		tok, _ := arr[2].ToString()
		cur, err := strconv.ParseUint(tok, 10, 64)
		if err == nil && code == 2 {
			return nil, &fence.StaleError{Resource: resource, Key: snap.Key, Token: snap.Token, Current: lease.Token(cur)}
		}
		if err == nil {
			return nil, &fence.ForeignLeaseError{Resource: resource, Key: snap.Key, Token: snap.Token, FencedBy: key, Current: lease.Token(cur)}
		}
	}
	return nil, lease.Indeterminate(fmt.Errorf("fence: resource %q: unexpected reply %v", resource, msg))
}

// classify explains an error from valkey-go, by valkeyplumbing.Classify: a
// reply error from the server means the script refused the write (or never
// ran) and wrote nothing; a connection that could not be opened means
// nothing was sent; anything else may have been applied.
func classify(resource string, err error) error {
	switch valkeyplumbing.Classify(err) {
	case applied.Unknown:
		return lease.Indeterminate(fmt.Errorf("fence: resource %q: %w", resource, err))
	case applied.No:
		if valkeyplumbing.Misconfigured(err) { // a refused login, ACL permission or command
			return lease.Misconfigured(fmt.Errorf("fence: resource %q: refused by the server, nothing written (configuration: see the package documentation for the ACL rules): %w", resource, err))
		}
		if valkeyplumbing.Refused(err) {
			return fmt.Errorf("fence: resource %q: refused by the server, nothing written: %w", resource, err)
		}
		return fmt.Errorf("fence: resource %q: could not connect, not sent: %w", resource, err)
	}
	return nil
}
