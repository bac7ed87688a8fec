package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/internal/valkeyplumbing"
	"github.com/golib/lease/lease"
)

var (
	_ lease.Sweeper = (*Sweeper)(nil)
	_ lease.Sweeper = (*Cache)(nil)
)

// A Sweeper deletes the invalidation marks that can no longer refuse
// anything: it is the lease.Sweeper of the entries of the Caches with one
// Prefix and lease Store. A Cache needs its lease client before it exists,
// so build the Sweeper first and give it to that client:
//
//	store, err := leasevalkey.New(client, leasevalkey.Options{})
//	...
//	marks, err := cache.NewSweeper(client, store, cache.DefaultPrefix)
//	...
//	leases, err := lease.NewClient(store, lease.ClientOptions{Owner: "web/" + hostname, Sweepers: []lease.Sweeper{marks}})
//	...
//	pages, err := cache.New(client, leases, cache.Options{TTL: time.Minute})
//
// The lease client then sweeps the marks with its Store, in the
// background, under its sweep lease (see lease.ClientOptions.SweepEvery).
// Cache.Sweep does the same walk. A Sweeper is safe for concurrent use.
type Sweeper struct {
	client valkey.Client
	store  *leasevalkey.Store
	prefix string
}

// NewSweeper returns the Sweeper of the invalidation marks that the Caches
// with Prefix prefix ("" for DefaultPrefix), whose lease clients take
// their refresh leases from store, keep on the servers behind client. It
// fails on a nil argument or a Prefix that New refuses. It does not talk
// to the server.
//
// A mark is judged by the record of its refresh lease in store: give the
// Store of the Caches' lease client, with its Prefix and Retention.
func NewSweeper(client valkey.Client, store *leasevalkey.Store, prefix string) (*Sweeper, error) {
	switch {
	case client == nil:
		return nil, errors.New("cache: NewSweeper: nil valkey client")
	case store == nil:
		return nil, errors.New("cache: NewSweeper: nil lease Store")
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := checkPrefix("NewSweeper", prefix); err != nil {
		return nil, err
	}
	return &Sweeper{client: client, store: store, prefix: prefix}, nil
}

// checkPrefix returns why prefix cannot be a Cache's Prefix, naming the
// function fn, or nil.
func checkPrefix(fn, prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("cache: %s: Prefix %q must not contain '{' or '}'", fn, prefix)
	}
	if err := lease.ValidateKey(prefix); err != nil {
		return fmt.Errorf("cache: %s: Prefix: %w", fn, err)
	}
	return nil
}

// Sweep implements lease.Sweeper: it deletes one page of the invalidation
// marks that are redundant, and names each entry whose mark it deleted
// (with o.DryRun, would delete) by its refresh lease's key, Prefix + cache
// key, in SweepPage.Removed.
//
// A mark refuses the publications of the refresh lease's acquisitions
// with a token up to it, which began before the invalidation. It is only
// needed while one of them could still pass Publish's lease check: while
// the record shows such a token, not released and not expired on the
// server's clock. So a mark is deleted if the record is missing, shows a
// later token, or shows such a token released or force-released, or
// expired more than the lease Store's Retention ago (the margin the Store
// keeps against a backward step of the server's clock; with
// lease.KeepForever such a mark waits for the next acquisition). A
// publication deletes the mark of its entry itself, since its token is
// later; the sweep deletes the marks of entries invalidated and not
// refreshed since.
//
// A page is one SCAN (COUNT o.Limit, MATCH on the marks' names, TYPE
// string) on one primary, then one script per mark found, pipelined, in
// the mark's hash slot (lua/sweep.lua), that decides on the server's
// clock and deletes the mark in one atomic step. On a cluster the
// primaries are walked one after the other; a walk interrupted by a
// failover or a resharding fails and must start again. Pages may be empty
// while Next is not "". Concurrent sweeps, publications and invalidations
// are safe.
//
// The user needs SCAN and ROLE besides the commands the package
// documentation lists; the script deletes with UNLINK, which that rule
// grants.
func (s *Sweeper) Sweep(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
	if o.Limit < 1 {
		return lease.SweepPage{}, fmt.Errorf("cache: sweep: limit %d is not positive", o.Limit)
	}
	if ctx.Err() != nil {
		return lease.SweepPage{}, s.sweepError(fmt.Errorf("not sent: %w", context.Cause(ctx)))
	}
	// The names of marks after the Prefix follow the records' names after
	// the Store's prefix, whose three forms (see the lease Store) share
	// only the '{': parseMark picks the marks out.
	match := valkeyplumbing.GlobEscape(s.prefix+"{") + "*" + valkeyplumbing.GlobEscape(markSuffix)
	names, next, err := valkeyplumbing.ScanPrimaries(ctx, s.client, o.Cursor, match, "string", o.Limit)
	if err != nil {
		return lease.SweepPage{}, s.sweepError(err)
	}
	retention := "-1"
	if r := s.store.Retention(); r != lease.KeepForever {
		retention = strconv.FormatInt(r.Microseconds(), 10)
	}
	script, dry := sweepScript, "0"
	if o.DryRun {
		script, dry = sweepDryScript, "1"
	}
	var (
		leaseKeys []string
		execs     []valkey.LuaExec
	)
	for _, name := range names {
		lk, record, ok := s.parseMark(name)
		if !ok || slices.Contains(leaseKeys, lk) {
			continue
		}
		leaseKeys = append(leaseKeys, lk)
		execs = append(execs, valkey.LuaExec{Keys: []string{record, name}, Args: []string{retention, dry}})
	}
	if len(execs) == 0 {
		return lease.SweepPage{Next: next}, nil
	}
	var (
		removed []string
		first   error
	)
	for i, res := range script.ExecMulti(ctx, s.client, execs...) {
		n, err := res.AsInt64()
		switch {
		case err == nil:
			if n == 1 {
				removed = append(removed, leaseKeys[i])
			}
		case valkeyplumbing.WrongType(err):
			// The record is no lease record: leave the mark alone.
		case first == nil:
			first = s.sweepError(fmt.Errorf("mark of %q: %w", leaseKeys[i], classify(err)))
		}
	}
	if first != nil {
		return lease.SweepPage{Removed: removed}, first
	}
	return lease.SweepPage{Removed: removed, Next: next}, nil
}

// parseMark returns the refresh lease's key and record of the entry whose
// invalidation mark is named name, or false if name is no mark of this
// Prefix and Store. It accepts a name only if the entry's names give it
// back exactly.
func (s *Sweeper) parseMark(name string) (leaseKey, record string, ok bool) {
	inner, ok := strings.CutPrefix(name, s.prefix)
	if !ok {
		return "", "", false
	}
	inner, ok = strings.CutSuffix(inner, markSuffix)
	if !ok {
		return "", "", false
	}
	lk, ok := keyspace.ParseRecord("", inner)
	if !ok || !strings.HasPrefix(lk, s.prefix) || lease.ValidateKey(lk) != nil || len(lk) == len(s.prefix) {
		return "", "", false
	}
	record = s.store.RecordKey(lk)
	if s.prefix+record[len(s.store.Prefix()):]+markSuffix != name {
		return "", "", false
	}
	return lk, record, true
}

// sweepError explains an error of a sweep.
func (s *Sweeper) sweepError(err error) error {
	return fmt.Errorf("cache: sweep of the invalidation marks under %q: %w", s.prefix, err)
}

// Sweep implements lease.Sweeper, as the Sweeper of the Cache's Prefix and
// lease Store does (see Sweeper.Sweep). Give a lease client that sweeps
// in the background a Sweeper from NewSweeper instead: the Cache's own
// lease client exists before the Cache.
func (c *Cache) Sweep(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
	return c.marks.Sweep(ctx, o)
}
