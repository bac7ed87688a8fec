package cache

import (
	"fmt"
	"strings"

	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/lease"
)

// DefaultPrefix is the Prefix a zero Options means.
const DefaultPrefix = "cache:"

// Suffixes of the names that follow an entry's hash tag.
const (
	freshSuffix     = ":fresh"
	valueSuffix     = ":value"
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
	fresh   string // the freshness marker (a string holding the publishing token)
	value   string // the value (a string)
	mark    string // the invalidation mark (a string holding a token)
	channel string // the shard channel that announces publications
}

// checkKey validates key before any I/O; op names the operation in the
// error. The refresh lease's key, Prefix + key, must pass
// lease.ValidateKey; New checked the prefix already.
func (c *Cache) checkKey(op, key string) error {
	if err := lease.ValidateKey(key); err != nil {
		return fmt.Errorf("cache: %s %.80q: %w", op, key, err)
	}
	if n := len(c.prefix) + len(key); n > lease.MaxKeyLen {
		return fmt.Errorf("cache: %s %.80q: %w: Prefix and key are %d bytes, longer than the limit of %d", op, key, lease.ErrInvalidKey, n, lease.MaxKeyLen)
	}
	return nil
}

// readNames returns the names of key's freshness marker and value, in one
// allocation for a key without a reserved byte whose lease key is
// recorded as <store prefix>{<escaped lease key>} (it holds no hash tag
// and is no permit's key): the hit path needs nothing else. key must have
// passed checkKey.
func (c *Cache) readNames(key string) (fresh, value string) {
	if strings.IndexByte(key, '{') >= 0 || keyspace.IsPermit(c.prefix, key) {
		// The record has a tag of its own: the names are the record's name
		// after the Store's prefix, under the Cache's.
		base := c.prefix + keyspace.Record("", c.prefix+key)
		return base + freshSuffix, base + valueSuffix
	}
	// The names are <Prefix>{<escaped Prefix><escaped key>}<suffix>, the
	// record's hash tag (keyspace escapes piece by piece as it does whole,
	// so the tag is the escaped lease key Prefix + key).
	esc := keyspace.Escape(key)
	base := len(c.prefix) + len(c.tagPrefix) + len(esc) + 1
	var b strings.Builder
	b.Grow(2*base + len(freshSuffix) + len(valueSuffix))
	for _, suffix := range [2]string{freshSuffix, valueSuffix} {
		b.WriteString(c.prefix)
		b.WriteString(c.tagPrefix)
		b.WriteString(esc)
		b.WriteByte('}')
		b.WriteString(suffix)
	}
	s := b.String()
	n := base + len(freshSuffix)
	return s[:n], s[n:]
}

// keys returns every name of key's entry, or an error (naming op) for a
// key that cannot be used, before any I/O.
func (c *Cache) keys(op, key string) (keys, error) {
	if err := c.checkKey(op, key); err != nil {
		return keys{}, err
	}
	fresh, value := c.readNames(key)
	return c.entryKeys(op, key, fresh, value)
}

// entryKeys returns every name of key's entry, given the names readNames
// returned for it; key must have passed checkKey. It saves a Get that
// missed from naming the entry twice.
func (c *Cache) entryKeys(op, key, fresh, value string) (keys, error) {
	base := strings.TrimSuffix(fresh, freshSuffix)
	lk := c.prefix + key
	rec := c.store.RecordKey(lk)
	// The entry's names must follow the record's, or the scripts would
	// touch two slots: check it here, on every path that writes.
	if after := base[len(c.prefix):]; rec != c.store.Prefix()+after {
		return keys{}, fmt.Errorf("cache: %s %q: the lease Store names the record %q, not %s after its prefix", op, key, rec, after)
	}
	return keys{
		key:     key,
		lease:   lk,
		record:  rec,
		fresh:   fresh,
		value:   value,
		mark:    base + markSuffix,
		channel: base + publishedSuffix,
	}, nil
}
