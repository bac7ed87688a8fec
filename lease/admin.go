package lease

import "context"

// Lister is an optional Backend capability, found by type assertion as
// database/sql finds driver.Pinger: it lists the keys a backend keeps a
// record of, for operators (the leasectl command) and dashboards. A
// Client never calls it.
type Lister interface {
	// List returns a page of the records of the keys that start with
	// prefix ("" lists every key), and the cursor of the next page, or ""
	// when the listing is complete. Pass "" as cursor to begin; any other
	// cursor must come from an earlier List with the same prefix, and is
	// otherwise refused with an error.
	//
	// Records are those Inspect would return, free keys included (Held
	// false, Token the last token issued). limit (at least 1) bounds the
	// page: it holds at most limit records, and may hold fewer, even none
	// while the cursor is not "", so a caller that wants n records asks
	// for n minus what it has until it has them or the cursor is "". A
	// backend whose own walk returns more at once (Valkey's SCAN treats
	// COUNT as a hint) keeps the rest for the next page, in the cursor.
	// A key that exists during the whole listing is returned at least
	// once, and may be returned more than once; keys created or changed
	// meanwhile may or may not appear.
	// The order is unspecified. Every record is as the backend saw it when
	// it read that key: a page is not a snapshot taken at one instant.
	//
	// ctx bounds one page. List never returns a holder's nonce.
	List(ctx context.Context, prefix, cursor string, limit int) (records []Record, next string, err error)
}

// ForceReleaser is an optional Backend capability, found by type
// assertion: it ends an acquisition without its nonce, for an operator
// freeing a key that a crashed or wedged process holds. A Client never
// calls it.
//
// Forcing a release is safe for data only where every protected write is
// fenced with the lease's token: the old holder may still be running, and
// only the fence stops its writes once the next holder has written.
type ForceReleaser interface {
	// ForceRelease expires the lease on key now, on the backend's clock,
	// as if its holder had released it: the key is free at once, waiters
	// that a ReleaseWatcher serves are woken, and the key keeps its token,
	// so the next acquisition gets a higher one and fences refuse the old
	// holder's writes. The old holder's next Renew or Release fails with a
	// *LostError.
	//
	// If token is 0, ForceRelease ends whichever acquisition holds key. If
	// token is not 0, it ends the acquisition only if it holds token,
	// which lets an operator release exactly the holder they inspected;
	// otherwise it changes nothing and returns a *LostError (Reason
	// Superseded if another acquisition holds or held key since; Expired,
	// ForceReleased or RecordLost if that acquisition already ended, as
	// Renew would say). The ended holder's own Renew and Release then fail
	// with Reason ForceReleased, until another acquisition takes the key.
	//
	// It returns the key's record as it was just before, read in the same
	// atomic operation: when the error is nil and Held is true, that is the
	// holder this call ended, and no other. When token is 0 and nothing
	// holds key at the instant the operation takes effect, it changes
	// nothing and returns a record with Held false and a nil error, even if
	// an acquisition that began later holds key by the time it returns.
	ForceRelease(ctx context.Context, key string, token Token) (Record, error)
}
