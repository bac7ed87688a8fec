package fence

import (
	"fmt"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/golib/lease/lease"
)

// MaxResourceLen is the longest resource name, in bytes.
const MaxResourceLen = 1024

// Mark is the state of one resource's fence: the lease key the resource is
// fenced by and the highest token of that lease it has accepted. The zero
// Mark is a fence that has accepted nothing yet.
//
// Marks encode to JSON as {"key": …, "token": …} with the token as a
// number; every token, up to 2^64−1, decodes back exactly in Go (tokens of
// this module's backends stay below 2^53, so JavaScript reads them exactly
// too).
type Mark struct {
	Key   string      `json:"key"`
	Token lease.Token `json:"token"`
}

// IsZero reports whether m is the fence of a resource that has accepted
// nothing.
func (m Mark) IsZero() bool { return m.Key == "" && m.Token == 0 }

// Admit applies the fencing rule to a write under snap on the resource
// named resource whose fence is m. The write is admitted if the fence has
// accepted nothing yet, or if it is fenced by the same lease key and
// snap.Token ≥ m.Token: a higher token is a newer acquisition, an equal one
// is the same acquisition writing again (tokens are unique per key).
// Admit then returns the fence after the write, which the caller stores
// atomically with the write. Otherwise it returns m unchanged and a
// *StaleError or a *ForeignLeaseError, and the caller must write nothing.
//
// The mark never goes down: the returned Mark's token is never below m's.
// Admit is the rule that every store in this package implements; call it
// to fence a resource of your own (see the package documentation).
func (m Mark) Admit(resource string, snap lease.Snapshot) (Mark, error) {
	switch {
	case m.IsZero():
		return Mark{Key: snap.Key, Token: snap.Token}, nil
	case m.Key != snap.Key:
		return m, &ForeignLeaseError{Resource: resource, Key: snap.Key, Token: snap.Token, FencedBy: m.Key, Current: m.Token}
	case snap.Token < m.Token:
		return m, &StaleError{Resource: resource, Key: snap.Key, Token: snap.Token, Current: m.Token}
	}
	return Mark{Key: snap.Key, Token: snap.Token}, nil
}

// ValidateSnapshot reports whether snap can fence a write: it must carry a
// token (take it from Handle.Snapshot, or for a lease on a set of keys
// from Handle.SnapshotFor, as the Snapshot of a set has none) and a valid
// lease key. Every fenced
// write checks it before any I/O; the error wraps ErrInvalid.
func ValidateSnapshot(snap lease.Snapshot) error {
	if snap.Token == 0 {
		return invalid("snapshot of lease %q has no token (take it from Handle.Snapshot; a set of keys has one snapshot per key: take it from Handle.SnapshotFor(key))", snap.Key)
	}
	if err := lease.ValidateKey(snap.Key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// ValidateResource reports whether name can name a fenced resource: it must
// be non-empty, at most MaxResourceLen bytes of valid UTF-8, and contain no
// control characters (which includes NUL) and no Unicode replacement
// character, the same rules as lease keys. Valkey resources must also not
// contain '{' or '}' (see Valkey). The error wraps ErrInvalid.
func ValidateResource(name string) error {
	if name == "" {
		return invalid("resource name is empty")
	}
	if len(name) > MaxResourceLen {
		return invalid("resource name is %d bytes, longer than the limit of %d", len(name), MaxResourceLen)
	}
	for i, r := range name {
		switch {
		case r == utf8.RuneError:
			return invalid("resource %.40q has invalid UTF-8 at byte %d", name, i)
		case unicode.IsControl(r):
			return invalid("resource %.40q has control character %U at byte %d", name, r, i)
		}
	}
	return nil
}

// sortedResources validates resources and returns them sorted (by bytes)
// and without duplicates, the order in which every store locks them.
func sortedResources(resources []string) ([]string, error) {
	if len(resources) == 0 {
		return nil, invalid("no resource to fence")
	}
	for _, r := range resources {
		if err := ValidateResource(r); err != nil {
			return nil, err
		}
	}
	out := slices.Clone(resources)
	slices.Sort(out)
	return slices.Compact(out), nil
}
