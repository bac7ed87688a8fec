package lease

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// MaxPermits is the largest number of permits a semaphore may have: each
// acquisition reads the records of all of them in one backend operation.
const MaxPermits = 256

// MaxSetKeys is the largest number of keys one set acquisition may hold:
// the backend reads and writes all of them in one operation.
const MaxSetKeys = 64

// PermitKey returns the lease key of permit slot of the semaphore named
// key: key + "/permit/" + slot in decimal. Each permit of a semaphore is
// an ordinary lease on its permit key: Inspect, List, ForceRelease and
// the fences see it as one, and its tokens rise as any key's do. A lease
// key the application chooses itself may have this form, and is then the
// same lease as that permit; keep semaphores and plain leases apart by
// their names.
func PermitKey(key string, slot int) string {
	return key + permitInfix + strconv.Itoa(slot)
}

// permitInfix separates a semaphore's key from a slot in a permit key.
const permitInfix = "/permit/"

// ParsePermitKey reports whether key has the form of a permit key,
// PermitKey(semaphore, slot) with a non-empty semaphore and a slot from 0
// to MaxPermits−1 written as PermitKey writes it (no sign, no leading
// zero), and if so returns them: PermitKey(ParsePermitKey(key)) is key.
// It is what tools such as leasectl use to group a listing by semaphore.
// A key of this form that the application leased itself with Acquire
// reads as a permit too (see PermitKey).
func ParsePermitKey(key string) (semaphore string, slot int, ok bool) {
	i := strings.LastIndex(key, permitInfix)
	if i <= 0 {
		return "", 0, false
	}
	digits := key[i+len(permitInfix):]
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || n >= MaxPermits || strconv.Itoa(n) != digits {
		return "", 0, false
	}
	return key[:i], n, true
}

// PermitAcquirer is an optional Backend capability, found by type
// assertion: counting semaphores with fenced permits. A semaphore is a
// key and a number of permits n; permit i (0 ≤ i < n) is the lease on
// PermitKey(key, i), recorded as any lease is, so Renew, Release,
// Inspect, ForceRelease, List and the sweepers of the Backend serve it
// unchanged. Client.AcquirePermit and Client.TryAcquirePermit use it.
type PermitAcquirer interface {
	// AcquirePermit grants the acquisition r.Nonce one permit of the
	// semaphore r.Key among permits permits (1 ≤ permits ≤ MaxPermits),
	// in one atomic operation of the backend: the lowest slot i < permits
	// whose permit key is free (never acquired, released, or expired on
	// the backend's clock) becomes held by r.Nonce for r.TTL, exactly as
	// Backend.Acquire would grant PermitKey(r.Key, i). It returns the slot
	// and a token strictly greater than every token issued before for any
	// permit key of r.Key, whatever its slot, so that tokens rise across
	// the semaphore as a whole: a resource may be fenced by the
	// semaphore's key with a permit's token (see Handle.SnapshotFor).
	//
	// It is idempotent for one nonce: if a permit key of r.Key below
	// permits is held by r.Nonce, AcquirePermit extends that lease by
	// r.TTL and returns its slot and token.
	//
	// Permits at slots at or above permits are not looked at: a caller
	// that lowers the number of permits gets no new permit until fewer
	// than the new number are held below it, while permits granted above
	// it earlier last until they are released or expire.
	//
	// If every permit below permits is held by another acquisition, it
	// returns a *NotAcquiredError naming the holder whose lease ends
	// first (its owner, token and remaining time), with Key r.Key.
	AcquirePermit(ctx context.Context, r AcquireRequest, permits int) (slot int, token Token, err error)
}

// SetAcquirer is an optional Backend capability, found by type assertion:
// leases on several keys taken all or nothing. Client.AcquireSet and
// Client.TryAcquireSet use it. Each key of a set is recorded as a lease
// of its own, held by the set's nonce with the set's token, so Inspect,
// List, ForceRelease and the sweepers serve it unchanged.
//
// Keys are given sorted and without duplicates (the Client sorts them).
// A backend that can only act atomically on keys in one place (a Valkey
// cluster: one hash slot) refuses a set that spans several before any
// I/O, with an error matching ErrInvalidKey that says how to name the
// keys.
type SetAcquirer interface {
	// AcquireSet grants the acquisition r.Nonce every key of keys, if
	// every one is free, in one atomic operation, for r.TTL; it returns
	// one token strictly greater than every token issued before for each
	// of the keys. If any key is held by another acquisition it changes
	// nothing and returns a *NotAcquiredError naming that key's holder
	// (the first such key in order). r.Key is unused.
	//
	// It is idempotent for one nonce: if r.Nonce holds every key of keys,
	// it extends them all by r.TTL and returns the same token.
	//
	// Two acquisitions of overlapping sets never wait for each other in a
	// cycle: a backend that locks keys locks them in order.
	AcquireSet(ctx context.Context, keys []string, r AcquireRequest) (Token, error)

	// RenewSet extends the leases on every key of keys held by
	// acquisition a (a.Key unused) to ttl from now, keeping the token, if
	// a holds every one of them and none has expired; otherwise it
	// changes nothing and returns a *LostError for the first key in order
	// that a no longer holds, with that key's reason as Renew gives it.
	RenewSet(ctx context.Context, keys []string, a Acquisition, ttl time.Duration) error

	// ReleaseSet ends acquisition a's leases on every key of keys that it
	// still holds, in one atomic operation, so they are free at once. It
	// returns nil if a held every key, and otherwise a *LostError for the
	// first key in order that it no longer held, after releasing the
	// others. If a.Token is 0, the acquisition is identified by nonce
	// alone (the Client's clean-up after an unanswered AcquireSet).
	ReleaseSet(ctx context.Context, keys []string, a Acquisition) error
}
