package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/lease"
)

// The value key holds a header and then the value:
//
//	<mode><token>\n<value>
//
// token is the publishing acquisition's token in decimal. mode says how
// long the value is fresh:
//
//   - modeFresh ('F'): as long as the key exists; it expires after TTL.
//     Caches without StaleFor publish this way, so that their hit is one
//     GET of one key.
//   - modeMarked ('S'): while the freshness marker holds the same token; the
//     marker expires after TTL and the value StaleFor later. Caches with
//     StaleFor publish this way and read both keys with one MGET.
//
// Every Cache reads both modes, so Caches with different StaleFor can share
// entries.
const (
	modeFresh  = "F"
	modeMarked = "S"
)

// maxHeader is the longest header: a mode byte, a token below 2^64 and a
// newline.
const maxHeader = 1 + 20 + 1

// stored returns what the value key holds for value published by the
// acquisition with the given token: the header, then value.
func (c *Cache) stored(token lease.Token, value []byte) string {
	b := make([]byte, 0, maxHeader+len(value))
	b = append(b, c.mode()...)
	b = strconv.AppendUint(b, uint64(token), 10)
	b = append(b, '\n')
	return string(append(b, value...))
}

// mode returns the mode this Cache publishes in.
func (c *Cache) mode() string {
	if c.stale > 0 {
		return modeMarked
	}
	return modeFresh
}

// entry is what read found.
type entry struct {
	val   []byte
	token lease.Token // of the acquisition that published val
	fresh bool        // val is within its TTL
	stale bool        // val is past its TTL, within its publisher's StaleFor
}

// read reads an entry. Without StaleFor it is one GET of the value, plus a
// GET of the marker for a value that a Cache with StaleFor published; with
// StaleFor it is one MGET of marker and value, which share a hash slot.
func (c *Cache) read(ctx context.Context, fresh, value string) (entry, error) {
	if c.stale == 0 {
		v, err := c.client.Do(ctx, c.client.B().Get().Key(value).Build()).AsBytes()
		if valkey.IsValkeyNil(err) {
			return entry{}, nil
		} else if err != nil {
			return entry{}, err
		}
		e, err := parseStored(v)
		if err != nil || e.fresh {
			return e, err
		}
		m, err := c.client.Do(ctx, c.client.B().Get().Key(fresh).Build()).ToString()
		if err != nil && !valkey.IsValkeyNil(err) {
			return entry{}, err
		}
		if m == e.token.String() {
			e.fresh = true
			return e, nil
		}
		return entry{}, nil // stale, and this Cache serves no stale values
	}
	vals, err := c.client.Do(ctx, c.client.B().Mget().Key(fresh, value).Build()).ToArray()
	if err != nil {
		return entry{}, err
	}
	if len(vals) != 2 {
		return entry{}, fmt.Errorf("unexpected MGET reply of %d values", len(vals))
	}
	if vals[1].IsNil() {
		return entry{}, nil
	}
	v, err := vals[1].AsBytes()
	if err != nil {
		return entry{}, fmt.Errorf("the value key does not hold a string: %w", err)
	}
	e, err := parseStored(v)
	if err != nil || e.fresh {
		return e, err
	}
	if m, err := vals[0].ToString(); err == nil && m == e.token.String() {
		e.fresh = true
	} else {
		e.stale = true
	}
	return e, nil
}

// parseStored splits what the value key holds into header and value. The
// entry is fresh if its mode is modeFresh; for modeMarked the caller checks
// the marker.
func parseStored(v []byte) (entry, error) {
	head, _, ok := bytes.Cut(v[:min(len(v), maxHeader)], []byte{'\n'})
	if !ok || len(head) < 2 || (head[0] != modeFresh[0] && head[0] != modeMarked[0]) {
		return entry{}, errors.New("the value key does not hold a cache entry (does another program write under this Prefix?)")
	}
	var tok uint64
	for _, d := range head[1:] {
		if d < '0' || d > '9' || tok > (1<<64-1-9)/10 {
			return entry{}, fmt.Errorf("the value key's header has a bad token %q", head[1:])
		}
		tok = tok*10 + uint64(d-'0')
	}
	return entry{val: v[len(head)+1:], token: lease.Token(tok), fresh: head[0] == modeFresh[0]}, nil
}
