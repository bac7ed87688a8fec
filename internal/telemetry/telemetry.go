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
// "deadline_passed", "force_released", "record_lost", or "unknown" when err
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

	mu   sync.Mutex
	seen map[string]struct{}
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
	if k == nil {
		return ""
	}
	l := k.label(key)
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.seen[l]; ok {
		return l
	}
	if len(k.seen) >= k.max {
		return Other
	}
	k.seen[l] = struct{}{}
	return l
}

// heldSet tracks which acquisitions this process holds, so that a lease
// counts once however many of Released, ReleaseFailed and Lost it ends
// with. Safe for concurrent use.
type heldSet struct {
	mu sync.Mutex
	m  map[held]struct{}
}

type held struct {
	key   string
	token lease.Token
}

// Acquire records key's acquisition with token; it reports false if it was
// already recorded.
func (h *heldSet) Acquire(key string, token lease.Token) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[held]struct{})
	}
	if _, ok := h.m[held{key, token}]; ok {
		return false
	}
	h.m[held{key, token}] = struct{}{}
	return true
}

// End forgets the acquisition; it reports whether it was recorded, that is
// whether this is the first end of it.
func (h *heldSet) End(key string, token lease.Token) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.m[held{key, token}]; !ok {
		return false
	}
	delete(h.m, held{key, token})
	return true
}
