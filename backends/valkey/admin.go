package valkey

import (
	"context"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/internal/valkeyplumbing"
	"github.com/golib/lease/lease"
)

var (
	_ lease.Lister        = (*Store)(nil)
	_ lease.ForceReleaser = (*Store)(nil)
)

//go:embed lua/forcerelease.lua
var forceReleaseLua string

// forceReleaseScript is not retryable, like the other mutating scripts.
var forceReleaseScript = valkey.NewLuaScript(forceReleaseLua, valkey.WithLoadSHA1(true))

// The outcome of forcerelease.lua that is none of renew.lua's and
// release.lua's.
const outcomeNotHeld = 0

// parseRecordKey returns the lease key whose record is named name, or false
// if name is not the record of any valid key under prefix (another
// program's key, a semaphore's token key, a fence, a cache entry in the
// same hash slot). It accepts a name only if recordKey gives it back
// exactly.
func parseRecordKey(prefix, name string) (string, bool) {
	key, ok := keyspace.ParseRecord(prefix, name)
	if !ok || lease.ValidateKey(key) != nil {
		return "", false
	}
	return key, true
}

// recordNamePrefix returns what the records under prefix of every lease
// key starting with keyPrefix start with, for the SCAN MATCH of List and
// Sweep. If keyPrefix holds a hash tag, so does every key that starts with
// it, and their records all start with the record of keyPrefix itself
// (escaping piece by piece is escaping whole). Otherwise such keys may
// hold a tag of their own, or be permits of a semaphore whose key is
// shorter than keyPrefix, so it is what every record under prefix starts
// with, and the caller filters the keys (parseRecordKey).
func recordNamePrefix(prefix, keyPrefix string) string {
	if keyspace.HashTag(keyPrefix) != keyPrefix {
		return recordKey(prefix, keyPrefix)
	}
	return prefix + "{"
}

// List implements lease.Lister with SCAN (never KEYS) on every primary
// behind the client, one primary after the other: on a cluster, every
// primary the client knows; standalone or with a sentinel, the one
// primary. A page is one SCAN call, with COUNT limit and MATCH on the
// records' names, on one primary, followed by one Inspect of each record
// found, pipelined. Pages may be empty. SCAN may find more records than
// limit: List inspects and returns limit of them, and the cursor carries
// the keys of the others, which the next page inspects and returns before
// it scans on, so no page holds more than limit records.
//
// The cursor names the primary and its SCAN cursor. If that primary is no
// longer one when the next page is asked for (a failover, a resharding),
// List fails and the listing must start again; SCAN's own rule (every key
// present throughout is returned) holds only within one primary's slots.
// Replicas are never scanned. The user needs the SCAN and ROLE commands
// besides those the package documentation lists.
func (s *Store) List(ctx context.Context, prefix, cursor string, limit int) ([]lease.Record, string, error) {
	const op = "list"
	if limit < 1 {
		return nil, "", fmt.Errorf("leasevalkey: %s: limit %d is not positive", op, limit)
	}
	scan, keys, err := splitListCursor(cursor, prefix)
	if err != nil {
		return nil, "", fmt.Errorf("leasevalkey: %s: %w", op, err)
	}
	next := scan
	if len(keys) == 0 {
		if keys, next, err = s.scanRecords(ctx, op, prefix, scan, limit); err != nil {
			return nil, "", err
		}
	}
	if len(keys) > limit {
		keys, next = keys[:limit], joinListCursor(next, keys[limit:])
	}
	if len(keys) == 0 {
		return nil, next, nil
	}
	execs := make([]valkey.LuaExec, len(keys))
	for i, k := range keys {
		execs[i] = valkey.LuaExec{Keys: []string{recordKey(s.prefix, k)}}
	}
	recs := make([]lease.Record, 0, len(keys))
	for i, res := range inspectScript.ExecMulti(ctx, s.client, execs...) {
		rec, err := inspectReply(keys[i], res)
		if err != nil {
			return nil, "", err
		}
		if rec.Held || rec.Token != 0 { // the record may be gone since SCAN
			recs = append(recs, rec)
		}
	}
	return recs, next, nil
}

// listPending separates, in a cursor of List, the walk's own cursor from
// the keys that SCAN found and the previous page left for the next. The
// walk's cursor ("cursor@address") never holds it.
const listPending = "+"

// joinListCursor returns the cursor of List that continues the walk at
// scan after returning the records of keys, encoded so that the cursor is
// one shell word: base64url of the keys, one a line (a key holds no
// control character).
func joinListCursor(scan string, keys []string) string {
	return scan + listPending + base64.RawURLEncoding.EncodeToString([]byte(strings.Join(keys, "\n")))
}

// splitListCursor is the inverse of joinListCursor. A cursor without
// pending keys is the walk's own; every pending key must start with
// prefix, as those of a listing of prefix do.
func splitListCursor(cursor, prefix string) (scan string, keys []string, err error) {
	scan, enc, ok := strings.Cut(cursor, listPending)
	if !ok {
		return cursor, nil, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(raw) == 0 {
		return "", nil, fmt.Errorf("cursor %q is not one List returned", cursor)
	}
	keys = strings.Split(string(raw), "\n")
	for _, k := range keys {
		if lease.ValidateKey(k) != nil || !strings.HasPrefix(k, prefix) {
			return "", nil, fmt.Errorf("cursor %q does not belong to a listing of prefix %q", cursor, prefix)
		}
	}
	return scan, keys, nil
}

// scanRecords is one page of a walk over the records of the lease keys
// that start with keyPrefix, for List and Sweep (op names the caller in
// errors): one SCAN, from cursor, with COUNT limit, on one primary. It
// returns the lease keys whose records it found, each once, and the cursor
// of the next page, "" at the end of the walk.
func (s *Store) scanRecords(ctx context.Context, op, keyPrefix, cursor string, limit int) (keys []string, next string, err error) {
	if limit < 1 {
		return nil, "", fmt.Errorf("leasevalkey: %s: limit %d is not positive", op, limit)
	}
	if ctx.Err() != nil {
		return nil, "", beforeSend(ctx, op)
	}
	names, next, err := valkeyplumbing.ScanPrimaries(ctx, s.client, cursor, valkeyplumbing.GlobEscape(recordNamePrefix(s.prefix, keyPrefix))+"*", "hash", limit)
	if errors.Is(err, valkeyplumbing.ErrWalk) {
		return nil, "", fmt.Errorf("leasevalkey: %s: %w", op, err)
	}
	if err != nil {
		return nil, "", walkError(op, err)
	}
	for _, name := range names {
		if k, ok := parseRecordKey(s.prefix, name); ok && strings.HasPrefix(k, keyPrefix) && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys, next, nil
}

// walkError is classify for the errors of the walk of scanRecords: a
// refused ROLE or SCAN names the command and the grant it needs, which the
// lease scripts' rule does not give.
func walkError(op string, err error) error {
	var ce *valkeyplumbing.CommandError
	if !valkeyplumbing.NoPermission(err) || !errors.As(err, &ce) {
		return classify(op, err)
	}
	grant := "+scan +role"
	if op == "sweep" {
		grant += " +del"
	}
	return fmt.Errorf("leasevalkey: %s: the Valkey user may not run %s, which %s needs besides the commands of the lease scripts: "+
		"add %q to its ACL rule (SECURITY.md, \"Valkey ACL rules\"): %w", op, ce.Command, opName[op], grant, err)
}

// opName names the Store method of an operation of scanRecords in errors.
var opName = map[string]string{"list": "Store.List", "sweep": "Store.Sweep"}

// inspectReply reads the reply of inspect.lua for key.
func inspectReply(key string, res valkey.ValkeyResult) (lease.Record, error) {
	const op = "inspect"
	vals, err := res.ToArray()
	if err != nil {
		return lease.Record{}, classify(op, err)
	}
	if len(vals) != 9 {
		return lease.Record{}, fmt.Errorf("leasevalkey: %s: unexpected reply of %d values", op, len(vals))
	}
	rec := lease.Record{Key: key}
	readRecord(&rec, vals)
	return rec, nil
}

// readRecord fills rec from vals, a reply of inspect.lua, or the values of
// forcerelease.lua after its outcome: token, owner (nil when free),
// remaining, acquired, renewed and transitions (microseconds since the Unix
// epoch, 0 when the record lacks them); and in inspect.lua's reply, the
// ending (lease.Ending's number), the candidates of a standing offer
// (joined by "\n"; nil if none) and the preferred candidate (nil if
// none). During a standing offer the owner is the one who handed the key
// off, and the key is not held.
func readRecord(rec *lease.Record, vals []valkey.ValkeyMessage) {
	if tok, err := vals[0].AsInt64(); err == nil {
		rec.Token = lease.Token(tok)
	}
	if owner, err := vals[1].ToString(); err == nil {
		left, _ := vals[2].AsInt64()
		rec.Held, rec.Owner, rec.Remaining = true, owner, time.Duration(left)*time.Microsecond
	}
	rec.AcquiredAt, rec.RenewedAt = microsTime(vals[3]), microsTime(vals[4])
	if n, err := vals[5].AsInt64(); err == nil && n > 0 {
		rec.Transitions = uint64(n)
	}
	if len(vals) < 9 {
		return
	}
	if n, err := vals[6].AsInt64(); err == nil && n > 0 {
		rec.Ending, rec.Held = lease.Ending(n), false
	}
	if offer, err := vals[7].ToString(); err == nil {
		rec.Candidates = splitCandidates(offer)
	}
	if pref, err := vals[8].ToString(); err == nil {
		rec.Preferred = pref
	}
}

// microsTime reads microseconds since the Unix epoch; 0 is the zero time.
func microsTime(v valkey.ValkeyMessage) time.Time {
	us, err := v.AsInt64()
	if err != nil || us <= 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

// ForceRelease implements lease.ForceReleaser in one script
// (lua/forcerelease.lua) that sets the record's expiry to -1 (long past,
// and unlike Release's 0, so that the ended holder learns it was forced),
// and announces the release to waiters.
func (s *Store) ForceRelease(ctx context.Context, key string, token lease.Token) (lease.Record, error) {
	const op = "force release"
	if err := validate(op, key); err != nil {
		return lease.Record{}, err
	}
	if ctx.Err() != nil {
		return lease.Record{}, beforeSend(ctx, op)
	}
	rec := recordKey(s.prefix, key)
	vals, err := forceReleaseScript.Exec(ctx, s.client, []string{rec}, []string{token.String(), releaseChannel(rec), s.retentionArg}).ToArray()
	if err != nil {
		return lease.Record{}, classify(op, err)
	}
	if len(vals) != 7 {
		return lease.Record{}, lease.Indeterminate(fmt.Errorf("leasevalkey: %s: unexpected reply of %d values", op, len(vals)))
	}
	outcome, err := vals[0].AsInt64()
	if err != nil {
		return lease.Record{}, lease.Indeterminate(fmt.Errorf("leasevalkey: %s: unexpected reply: %w", op, err))
	}
	prev := lease.Record{Key: key}
	readRecord(&prev, vals[1:])
	if outcome == outcomeDone || outcome == outcomeNotHeld {
		return prev, nil
	}
	if reason, ok := lostReasons[outcome]; ok {
		return prev, &lease.LostError{Key: key, Token: token, Reason: reason}
	}
	return prev, lease.Indeterminate(fmt.Errorf("leasevalkey: %s: unexpected outcome %d", op, outcome))
}
