package lease

import (
	"context"
	"time"
)

// Backend is the contract a lease store implements: four operations, each
// one atomic operation in the backend. It is to Client what driver.Conn is
// to sql.DB: key and policy validation, retries, timeouts, local deadlines,
// observations and managed renewal live in Client, never in a Backend.
//
// A Backend must be safe for concurrent use. leasetest.RunBackendSuite
// checks every rule below; passing it is the definition of a correct
// backend. Optional capabilities (ReleaseWatcher, Lister, ForceReleaser)
// are further interfaces, found by type assertion.
//
// # Errors
//
// Every method returns one of:
//
//   - nil: the operation was applied;
//   - a *NotAcquiredError (Acquire) or a *LostError (Renew, Release): the
//     backend answered and refused, and nothing changed;
//   - an error matching ErrIndeterminate (see Indeterminate): the request
//     may have reached the backend and may have been applied (a timeout, or a
//     connection lost after sending);
//   - any other error: the backend provably did not apply the request (for
//     example, the connection could not be opened), or a configuration
//     problem such as a missing permission. Mark a refusal that no retry
//     can cure with Misconfigured, so that Client.Acquire stops waiting.
//
// A context that ends before the reply arrives is reported as an
// indeterminate error that wraps the context's error, unless the request
// provably was not sent.
type Backend interface {
	// Acquire grants the lease on r.Key to the acquisition r.Nonce if the
	// key is free (never acquired, released, or expired on the backend's
	// clock), and returns a token strictly greater than every token issued
	// for r.Key before. The lease then expires r.TTL after the backend
	// applied the request, on the backend's clock.
	//
	// Acquire must be idempotent for one nonce: if the lease is currently
	// held by r.Nonce, Acquire extends it by r.TTL and returns the same
	// token, so that a retry after an indeterminate attempt resolves it.
	//
	// If another acquisition holds the key, Acquire returns a
	// *NotAcquiredError with the holder's owner string, token and remaining
	// time.
	Acquire(ctx context.Context, r AcquireRequest) (Token, error)

	// Renew extends the lease of acquisition a to ttl from now on the
	// backend's clock, keeping its token, if a (key, nonce and token) is
	// still current and not expired. Otherwise it returns a *LostError with
	// Reason Expired (a still shows as the last acquisition, ended by its
	// TTL or its own release), ForceReleased (a still shows as the last
	// acquisition, ended by a ForceReleaser), RecordLost (there is no record
	// of the key) or Superseded (another acquisition holds or held the key
	// since). The client always passes the acquisition's token; a backend
	// may refuse a.Token 0 as superseded, or treat it as Release does.
	Renew(ctx context.Context, a Acquisition, ttl time.Duration) error

	// Release ends acquisition a if it is still current and not expired,
	// so the key is free at once. It never lowers the key's token. If a is
	// not current it returns a *LostError as Renew does. If a.Token is 0,
	// the acquisition is identified by key and nonce alone (the client uses
	// this to clean up after an indeterminate Acquire).
	Release(ctx context.Context, a Acquisition) error

	// Inspect returns the key's current state as the backend sees it. It
	// never returns the holder's nonce. A key that is free has Held false;
	// Token is then the last token issued, if the backend still knows it.
	// AcquiredAt, RenewedAt and Transitions are kept by the backend's
	// acquire and renew, in the same atomic operation.
	Inspect(ctx context.Context, key string) (Record, error)
}

// AcquireRequest is what Client passes to Backend.Acquire.
type AcquireRequest struct {
	Key   string
	Owner string
	// Nonce is a random, unguessable string unique to this acquisition. It
	// is the acquisition's secret: backends store it but never return it,
	// log it or put it in an error.
	Nonce string
	TTL   time.Duration
	// Preferred asks the backend, if another acquisition holds the key,
	// to record Owner as the key's preferred candidate (Record.Preferred)
	// for TTL, in the same atomic operation as the refusal, and to
	// announce the change to change watchers (ChangeWatcher). It changes
	// nothing about who gets the key. A HandOffer backend must honour it;
	// others may ignore it.
	Preferred bool
}

// Acquisition identifies one acquisition to Backend.Renew and
// Backend.Release.
type Acquisition struct {
	Key   string
	Owner string
	Nonce string
	Token Token
}

// Record is a key's state as reported by Backend.Inspect, Lister.List and
// ForceReleaser.ForceRelease.
type Record struct {
	Key string
	// Held reports whether an acquisition holds the key now.
	Held bool
	// Owner and Token describe the holder when Held is true.
	Owner string
	Token Token
	// Remaining is the holder's remaining time on the backend's clock when
	// the backend answered.
	Remaining time.Duration

	// AcquiredAt is when the backend granted the key to the acquisition
	// that holds it (for a free key, to the last one), on the backend's
	// clock: kubectl's acquireTime. Zero if the backend does not know (a
	// record written by an older version of the backend).
	AcquiredAt time.Time
	// RenewedAt is when that acquisition last extended its lease, on the
	// backend's clock: by Renew, or by an Acquire retried with its nonce;
	// AcquiredAt until then (kubectl's renewTime). Zero if the backend does
	// not know.
	RenewedAt time.Time
	// Transitions counts the changes of holder the record has seen: the
	// grants of the key to a new acquisition after the first (kubectl's
	// leaseTransitions). A grant after a release or an expiry counts, also
	// to the same owner string; renewals and Acquire retried with the
	// holder's nonce do not. It counts from the record's creation: a record
	// the backend lost, or removed a retention after its lease ended,
	// starts again at 0.
	Transitions uint64

	// Ending says how the last acquisition ended, when Held is false:
	// released, expired, force-released or handed off. EndUnknown when
	// the key is held, was never acquired, or the backend cannot tell.
	Ending Ending
	// Candidates are the owner strings a hand-off (HandOffer) offered the
	// key to, while the offer stands: Held is then false, Token is the
	// token the first candidate to acquire will get, Owner is the owner
	// who handed the key off, and Remaining is what is left of the accept
	// window. Nil otherwise. Only these owners can acquire the key until
	// the window has passed.
	Candidates []string
	// Preferred is the owner string of a preferred candidate waiting for
	// the key (an Acquire with AcquireRequest.Preferred that found it
	// held), until that request's TTL has passed; "" if none. The holder
	// may hand the key off to it at its next safe point; nothing takes
	// the key from the holder.
	Preferred string
}

// ReleaseWatcher is an optional Backend capability, found by type
// assertion: it tells an Acquire that is waiting for a key the moment the
// key is released, instead of when the holder's lease would have ended.
// Acquire still tries again when the holder's remaining time runs out (or,
// for a holder it saw renew, after the policy's Poll), so a watcher may
// miss notifications, or send spurious ones, without harm: a missed one
// only delays the hand-over until then.
type ReleaseWatcher interface {
	// WatchReleases returns a channel that receives a value (at least
	// once, possibly more) after key is released, and a function that
	// stops the watch and frees its resources. The channel is never
	// closed. WatchReleases must not block for long; ctx bounds the setup
	// only (the client gives it OperationTimeout), not the watch.
	//
	// Acquire sets up a watch after an attempt found the key held, so the
	// holder may release it before the watch is in place. Such a release
	// must not go unseen: unless the backend knows the key is held once
	// the watch is in place (the memory backend does), the channel also
	// receives a value then, and the waiter asks again at once. Otherwise
	// a release in that window would leave the waiter asleep until the
	// holder's lease would have ended.
	WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error)
}
