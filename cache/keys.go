package cache

import (
	"fmt"
	"strings"

	"github.com/golib/lease/lease"
)

// DefaultPrefix is the Prefix a zero Options means.
const DefaultPrefix = "cache:"

// Suffixes of the names that follow an entry's hash tag.
const (
	valueSuffix     = ":value"
	freshSuffix     = ":fresh"
	markSuffix      = ":invalidated"
	publishedSuffix = ":published"
)

// keys are the names of everything that belongs to one cache entry. All of
// them carry the hash tag of the refresh lease's record, so they live in
// its hash slot.
type keys struct {
	key     string // the cache key, as the caller gave it
	lease   string // the refresh lease's key
	record  string // the refresh lease's record (a hash of the lease backend)
	value   string // the value (a string)
	fresh   string // the freshness marker (a string holding the publishing token)
	mark    string // the invalidation mark (a string holding a token)
	channel string // the shard channel that announces publications
}

// keys returns the names for key, or an error (prefixed with op) for a key
// that cannot be used, before any I/O.
func (c *Cache) keys(op, key string) (keys, error) {
	if key == "" {
		return keys{}, fmt.Errorf("cache: %s: %w: key is empty", op, lease.ErrInvalidKey)
	}
	lk := c.prefix + key
	if err := lease.ValidateKey(lk); err != nil {
		return keys{}, fmt.Errorf("cache: %s %.80q: %w", op, key, err)
	}
	rec := c.store.RecordKey(lk)
	// The backend names the record <its prefix>{<escaped lease key>}, with
	// no brace in its prefix and none in the escaped key: the tag is the
	// whole tail from the first brace.
	i := strings.IndexByte(rec, '{')
	if i < 0 || !strings.HasSuffix(rec, "}") || strings.IndexByte(rec[i+1:], '{') >= 0 {
		return keys{}, fmt.Errorf("cache: %s %q: lease record %q has no hash tag", op, key, rec)
	}
	base := c.prefix + rec[i:]
	return keys{
		key:     key,
		lease:   lk,
		record:  rec,
		value:   base + valueSuffix,
		fresh:   base + freshSuffix,
		mark:    base + markSuffix,
		channel: base + publishedSuffix,
	}, nil
}
