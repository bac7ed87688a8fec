// Package telemetry holds what the OpenTelemetry and Prometheus adapters
// share: how an event's error becomes a bounded outcome label, how keys
// become bounded key labels, and which acquisitions are held. Both adapters
// use it, so a dashboard built on one reads the same on the other.
//
// It reads the events of packages cache and leasequeue from their
// driver-free leaves, cacheevent and queueevent, and recognises fence's
// and cache's refusals by the values of internal/refused, so that an
// adapter links no store's client: only what its user's program links
// already.
package telemetry

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/golib/lease/guard"
	"github.com/golib/lease/internal/refused"
	"github.com/golib/lease/lease"
)

// Outcome labels. The set is closed: every error maps to one of them.
const (
	OK          = "ok"
	NotAcquired = "not_acquired"
	Lost        = "lost"
	Stale       = "stale"
	NotCurrent  = "not_current"
	Invalidated = "invalidated"
	Unknown     = "unknown"
	Canceled    = "canceled"
	Invalid     = "invalid"
	Error       = "error"
)

// Outcome names what err says about an operation, as one label of a small
// fixed set. An outcome that may or may not have been applied is Unknown
// whatever else the error matches, since that is what an operator must
// see first.
func Outcome(err error) string {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, lease.ErrIndeterminate):
		return Unknown
	case errors.Is(err, lease.ErrNotAcquired):
		return NotAcquired
	case errors.Is(err, refused.ErrStale):
		return Stale
	case errors.Is(err, guard.ErrNotCurrent):
		return NotCurrent
	case errors.Is(err, refused.ErrInvalidated):
		return Invalidated
	case errors.Is(err, lease.ErrLost):
		return Lost
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Canceled
	case errors.Is(err, lease.ErrInvalidKey), errors.Is(err, lease.ErrInvalidPolicy):
		return Invalid
	}
	return Error
}

// LostReason names why a lease was lost: "expired", "superseded",
// "deadline_passed", "force_released", "record_lost", "handed_off", or "unknown" when err
// carries no *lease.LostError.
func LostReason(err error) string {
	if le, ok := errors.AsType[*lease.LostError](err); ok {
		switch le.Reason {
		case lease.Expired:
			return "expired"
		case lease.Superseded:
			return "superseded"
		case lease.DeadlinePassed:
			return "deadline_passed"
		case lease.ForceReleased:
			return "force_released"
		case lease.RecordLost:
			return "record_lost"
		case lease.HandedOff:
			return "handed_off"
		}
	}
	return "unknown"
}

// Other is the key label of every key past the limit.
const Other = "other"

// Keys turns keys into key labels with a bound on how many distinct labels
// it hands out. The zero value (and a nil *Keys) labels nothing: Label
// returns "" for every key, and the adapters then leave the key label out.
type Keys struct {
	label func(key string) string
	max   int

	mu    sync.Mutex
	seen  map[string]struct{}
	other bool // Other was handed out
}

// NewKeys returns a labeller: label maps a key to its label (nil: no key
// label at all), and at most max distinct labels are handed out (max <= 0
// means 100); the rest read Other.
func NewKeys(label func(key string) string, max int) *Keys {
	if label == nil {
		return nil
	}
	if max <= 0 {
		max = 100
	}
	return &Keys{label: label, max: max, seen: make(map[string]struct{})}
}

// Enabled reports whether keys are labelled at all.
func (k *Keys) Enabled() bool { return k != nil }

// Label returns key's label: "" when key labels are off, Other once the
// limit of distinct labels is reached.
func (k *Keys) Label(key string) string {
	l, _ := k.Fresh(key)
	return l
}

// Fresh returns key's label as Label does, and whether this is the first
// time it hands that label out.
func (k *Keys) Fresh(key string) (string, bool) {
	if k == nil {
		return "", false
	}
	l := k.label(key)
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.seen[l]; ok {
		return l, false
	}
	if len(k.seen) >= k.max {
		fresh := !k.other
		k.other = true
		return Other, fresh
	}
	k.seen[l] = struct{}{}
	return l, true
}

// heldSet tracks which acquisitions this process holds, and until when:
// an acquisition counts once however many of Released, ReleaseFailed and
// Lost it ends with, and stops counting at its local deadline even if no
// event ever ends it (a handle dropped without Release, a lease left to
// expire, such as a scheduler's slot lease). Expired entries are dropped
// as acquisitions come in and when the set is counted, so its size is
// bounded by the leases held within one lease lifetime, scraped or not.
// Safe for concurrent use.
type heldSet struct {
	mu sync.Mutex
	m  map[held]heldEntry
	// pruneAt is the size at which Acquire next drops expired entries:
	// twice the size left by the last pruning, so pruning costs O(1) per
	// acquisition, amortised.
	pruneAt int
}

type held struct {
	key   string
	token lease.Token
}

type heldEntry struct {
	label series    // the key label and kind
	until time.Time // the local deadline, on the Translator's clock
}

// minPrune is the smallest size at which Acquire prunes.
const minPrune = 64

// Acquire records key's acquisition with token, counted under label, as
// held until until; now is the time. It reports false if it was already
// recorded.
func (h *heldSet) Acquire(key string, token lease.Token, label series, until, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[held]heldEntry)
	}
	if _, ok := h.m[held{key, token}]; ok {
		return false
	}
	if len(h.m) >= max(h.pruneAt, minPrune) {
		h.prune(now)
	}
	h.m[held{key, token}] = heldEntry{label: label, until: until}
	return true
}

// Renew moves the end of key's acquisition with token to until, if it is
// recorded and its end has not passed at now. An acquisition that was
// never recorded (a lease adopted with lease.Client.Adopt) or whose local
// deadline passed is not counted again.
func (h *heldSet) Renew(key string, token lease.Token, until, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.m[held{key, token}]; ok && e.until.After(now) && until.After(e.until) {
		e.until = until
		h.m[held{key, token}] = e
	}
}

// End forgets the acquisition; it reports whether it was recorded, that is
// whether this is the first end of it (its local deadline may have passed
// already).
func (h *heldSet) End(key string, token lease.Token) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.m[held{key, token}]; !ok {
		return false
	}
	delete(h.m, held{key, token})
	return true
}

// Count drops the entries whose end has passed at now and returns how many
// are left under each label and kind.
func (h *heldSet) Count(now time.Time) map[series]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prune(now)
	n := make(map[series]int)
	for _, e := range h.m {
		n[e.label]++
	}
	return n
}

// Len returns the number of entries, expired ones included.
func (h *heldSet) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// prune drops the entries whose end has passed at now. h.mu is held.
func (h *heldSet) prune(now time.Time) {
	for k, e := range h.m {
		if !e.until.After(now) {
			delete(h.m, k)
		}
	}
	h.pruneAt = 2 * len(h.m)
}
