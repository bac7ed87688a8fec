package valkey

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/lease"
)

//go:embed lua/check.lua
var checkLua string

// checkScript asks the server which commands of the Store the user may not
// run, without running them.
var checkScript = valkey.NewLuaScriptReadOnly(checkLua, valkey.WithLoadSHA1(true))

// sweepCommands are what Sweep needs beyond what every other operation of
// the Store needs.
var sweepCommands = []string{"DEL", "SCAN", "ROLE"}

// Minimum server version: EVALSHA_RO, script flags and sharded pub/sub
// arrived in Redis 7.0, which every Valkey release includes.
const minMajor = 7

// checkKey is the lease key Check inspects to see that the scripts run.
const checkKey = "leasevalkey-check"

// CheckReport is what Diagnose found.
type CheckReport struct {
	// Problems are settings or permissions that make leases unsafe or
	// operations fail, each naming the node and what to change.
	Problems []error
	// Advice are settings that keep leases safe but that an operator
	// should know about, such as an eviction policy that cannot evict
	// lease records but can fill the memory.
	Advice []string
}

// Err returns the problems as one error, or nil if there is none.
func (r CheckReport) Err() error {
	if err := errors.Join(r.Problems...); err != nil {
		return fmt.Errorf("leasevalkey: check: %w", err)
	}
	return nil
}

// Check asks every node behind the client whether it is set up in a way
// that keeps leases safe, and returns an error listing every problem
// found, or nil. It is Diagnose(ctx).Err(); see Diagnose for what it
// looks at. Call it at start-up.
func (s *Store) Check(ctx context.Context) error { return s.Diagnose(ctx).Err() }

// Diagnose asks every node behind the client whether it is set up in a
// way that keeps leases safe. Problems are:
//
//   - a maxmemory-policy that can evict a key without a TTL: allkeys-lru,
//     allkeys-lfu, allkeys-random, or a policy this package does not
//     know. The record of a held lease never carries a TTL, nor does a
//     fence key, and under such a policy the server may drop a held
//     lease's record under memory pressure, so that another process
//     could acquire the lease while the holder still works;
//   - a server older than Redis 7.0, which lacks the commands the scripts
//     use;
//   - an ACL user that may not run the lease scripts on the Store's keys
//     (Diagnose runs Inspect once, and asks the server, without running
//     them, whether the user may run HSET, PERSIST and PEXPIRE there; it
//     changes nothing), or may not publish on its release channels,
//     without which Acquire and Release fail (Diagnose publishes one
//     empty message on the channel of a key no lease uses).
//
// The volatile-* policies (volatile-lru, volatile-lfu, volatile-random,
// volatile-ttl; volatile-lru is the default of several managed services)
// evict only keys with a TTL: they never evict a held lease's record or a
// fence key, so they are advice, not problems. Of the lease records they
// may evict only those of ended leases, which carry their retention as a
// TTL (see Options.Retention): such an eviction ends the record's
// retention early, and with it the key's protection against a backward
// step of the server's clock, which is then what it is after a lost
// record (the next token is the server's clock); it never lets two
// holders hold a lease. When memory is full and no key with a TTL is
// left, such a server refuses writes, as noeviction does: acquisitions
// and renewals fail, and leases expire rather than being held twice.
//
// Advice also names the commands Sweep needs (DEL, SCAN, ROLE) that the
// user may not run, unless the Store keeps records forever, and each node
// whose append-only file is off (appendonly no, read from INFO's
// aof_enabled, so no CONFIG permission is needed): a restart of such a
// node loses its lease records, which frees every lease it held at once.
// Tokens still rise, as they are at least the server's clock in
// microseconds, so fenced writes stay safe, but two processes may both
// believe they hold a lease until the first notices the loss (reason
// lease.RecordLost or lease.Superseded). It is advice, not a problem,
// because leases stay safe for fenced writes, and because a service may
// keep its data by other means (a managed service's own log, a cluster's
// replicas). A node whose INFO says nothing of the append-only file is
// advice too: Diagnose says it could not tell.
//
// Diagnose needs the INFO command, which managed services sometimes
// restrict; the problem then says so.
func (s *Store) Diagnose(ctx context.Context) CheckReport {
	var r CheckReport
	nodes := s.client.Nodes()
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	slices.Sort(addrs)
	for _, addr := range addrs {
		c := nodes[addr]
		info, err := c.Do(ctx, c.B().Info().Section("server").Section("memory").Section("persistence").Build()).ToString()
		if err != nil {
			r.Problems = append(r.Problems, fmt.Errorf("%s: INFO: %w", addr, err))
			continue
		}
		switch p := infoField(info, "maxmemory_policy"); {
		case p == "" || p == "noeviction":
		case strings.HasPrefix(p, "volatile-") && slices.Contains(volatilePolicies, p):
			r.Advice = append(r.Advice, fmt.Sprintf("%s: maxmemory-policy is %s: it evicts only keys with a TTL, and held leases' records and fence keys have none, so leases are safe (it may evict the records of ended leases within their retention, which only forgets their history early); but when memory is full with keys without a TTL, acquisitions and renewals fail (leases then expire), so keep memory headroom and alert on used memory", addr, p))
		default:
			r.Problems = append(r.Problems, fmt.Errorf("%s: maxmemory-policy is %s: the server may evict held leases' records, which have no TTL, so two holders could hold one lease; set maxmemory-policy noeviction or a volatile-* policy", addr, p))
		}
		switch infoField(info, "aof_enabled") {
		case "1":
		case "0":
			r.Advice = append(r.Advice, fmt.Sprintf("%s: %s", addr, noPersistence))
		default:
			r.Advice = append(r.Advice, fmt.Sprintf("%s: INFO persistence does not say whether the append-only file is on (no aof_enabled field): if appendonly is no, %s", addr, noPersistenceCost))
		}
		version := infoField(info, "redis_version")
		name := "Redis"
		if v := infoField(info, "valkey_version"); v != "" {
			version, name = v, "Valkey"
		}
		major, _, _ := strings.Cut(version, ".")
		if n, err := strconv.Atoi(major); err != nil || (name == "Redis" && n < minMajor) {
			r.Problems = append(r.Problems, fmt.Errorf("%s: server version %s %q: need Valkey, or Redis %d.0 or newer", addr, name, version, minMajor))
		}
	}
	if _, err := s.Inspect(ctx, checkKey); err != nil {
		r.Problems = append(r.Problems, err)
	} else {
		s.checkCommands(ctx, &r)
	}
	ch := releaseChannel(recordKey(s.prefix, checkKey))
	if err := s.client.Do(ctx, s.client.B().Spublish().Channel(ch).Message("").Build()).Error(); err != nil {
		r.Problems = append(r.Problems, classify("publish on the release channel "+strconv.Quote(ch), err))
	}
	return r
}

// checkCommands reports the commands of the Store that the user may not
// run: those of Acquire, Release and ForceRelease as problems, those only
// Sweep needs as advice.
func (s *Store) checkCommands(ctx context.Context, r *CheckReport) {
	refused, err := checkScript.Exec(ctx, s.client, []string{recordKey(s.prefix, checkKey)}, nil).AsStrSlice()
	if err != nil {
		r.Problems = append(r.Problems, classify("check the user's commands", err))
		return
	}
	var scripts, sweep []string
	for _, cmd := range refused {
		if slices.Contains(sweepCommands, cmd) {
			sweep = append(sweep, cmd)
		} else {
			scripts = append(scripts, cmd)
		}
	}
	if len(scripts) > 0 {
		r.Problems = append(r.Problems, fmt.Errorf("the Valkey user may not run %s on the lease records, which the lease scripts need (see the package documentation for the ACL rules)", strings.Join(scripts, ", ")))
	}
	if len(sweep) > 0 && s.retention != lease.KeepForever {
		r.Advice = append(r.Advice, fmt.Sprintf("the Valkey user may not run %s, which Sweep needs: a lease.Client's background sweep is refused, and the records of leases that expired without a release (crashed holders) stay until a user with +scan +role +del sweeps; released records still end after their retention", strings.Join(sweep, ", ")))
	}
}

// noPersistenceCost says what a server without persistence costs, in the
// words of docs/valkey-quickstart.md, which recommends the settings.
const noPersistenceCost = "a restart frees every lease at once. Tokens still never go back (they are at least the server's clock in microseconds), so fenced writes stay safe, but two processes may both believe they hold a lease until the first notices the loss (loss reason record_lost or superseded). Set appendonly yes with appendfsync everysec (or always); see docs/valkey-quickstart.md, \"Start a server\""

// noPersistence is the advice for a node with appendonly no.
const noPersistence = "appendonly is no (no append-only file): " + noPersistenceCost

// volatilePolicies evict only keys that have a TTL.
var volatilePolicies = []string{"volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
