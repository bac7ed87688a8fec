package valkey

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Minimum server version: EVALSHA_RO, script flags and sharded pub/sub
// arrived in Redis 7.0, which every Valkey release includes.
const minMajor = 7

// checkKey is the lease key Check inspects to see that the scripts run.
const checkKey = "leasevalkey-check"

// Check asks every node behind the client whether it is set up in a way
// that keeps leases safe, and returns an error listing every problem
// found, or nil:
//
//   - a maxmemory-policy other than noeviction, which lets the server evict
//     a held lease's record under memory pressure (another process could
//     then acquire it while the holder still works);
//   - a server older than Redis 7.0, which lacks the commands the scripts
//     use;
//   - an ACL user that may not run the lease scripts on the Store's keys
//     (Check runs Inspect once; it changes nothing), or may not publish on
//     its release channels, without which Release fails (Check publishes
//     one empty message on the channel of a key no lease uses).
//
// Call it at start-up. It needs the INFO command, which managed services
// sometimes restrict; its error then says so.
func (s *Store) Check(ctx context.Context) error {
	var problems []error
	nodes := s.client.Nodes()
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	slices.Sort(addrs)
	for _, addr := range addrs {
		c := nodes[addr]
		info, err := c.Do(ctx, c.B().Info().Section("server").Section("memory").Build()).ToString()
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: INFO: %w", addr, err))
			continue
		}
		if p := infoField(info, "maxmemory_policy"); p != "" && p != "noeviction" {
			problems = append(problems, fmt.Errorf("%s: maxmemory-policy is %s: the server may evict lease records, so two holders could hold one lease; set maxmemory-policy noeviction", addr, p))
		}
		version := infoField(info, "redis_version")
		name := "Redis"
		if v := infoField(info, "valkey_version"); v != "" {
			version, name = v, "Valkey"
		}
		major, _, _ := strings.Cut(version, ".")
		if n, err := strconv.Atoi(major); err != nil || (name == "Redis" && n < minMajor) {
			problems = append(problems, fmt.Errorf("%s: server version %s %q: need Valkey, or Redis %d.0 or newer", addr, name, version, minMajor))
		}
	}
	if _, err := s.Inspect(ctx, checkKey); err != nil {
		problems = append(problems, err)
	}
	ch := releaseChannel(recordKey(s.prefix, checkKey))
	if err := s.client.Do(ctx, s.client.B().Spublish().Channel(ch).Message("").Build()).Error(); err != nil {
		problems = append(problems, classify("publish on the release channel "+strconv.Quote(ch), err))
	}
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("leasevalkey: check: %w", err)
	}
	return nil
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
