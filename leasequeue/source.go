package leasequeue

import (
	"context"
	"fmt"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// A Source holds the items of one queue: PostgresSource, ValkeySource and
// MemorySource are the sources, and the interface is closed (its methods
// are unexported), so that the queue's contract with its stores can change
// without breaking anyone.
//
// Each item is its own lease. Claiming an item is one request that makes
// it running and records the claim's holder, secret, token and expiry on
// the item itself, with the expiry on the source's clock, and completing
// or failing it is one request, fenced by the claim's token, that writes
// the outcome and ends the claim. So an item costs one request to claim
// (or a share of one, claiming several at once) and one to finish, and no
// lease backend is involved. The queue renews its claims in the background
// with the lease package's rules (see lease.Client.Adopt).
//
// The rules of lease.Backend hold for the claim of each item, under the
// item's lease key (Queue.Key): a token strictly greater than every token
// the item carried before, also after the source lost data or removed the
// finished item (see lease.Sweeper) and its ID was enqueued again, as long
// as its clock does not step back; expiry on the source's clock; and the
// same three kinds of errors (nil, a refusal, or an error matching
// lease.ErrIndeterminate when the request may have been applied). A
// worker that lost its claim can no longer change the item.
//
// A token must be plausible, too: PostgresSource and ValkeySource grant
// one only if it is at most fence.MaxTokenLead ahead of their clock, and
// refuse a larger one in a completion or failure with a
// *fence.ImplausibleTokenError (matching fence.ErrImplausibleToken),
// checking it on their own clock in the request that would write it; no
// backend can have issued such a token, so it comes from a forged or
// corrupted snapshot. An item whose fence already holds a token at or
// above that bound (written by a version of this package that did not
// refuse implausible tokens, or by hand) cannot get a greater plausible
// one: Run passes over it, so that it never holds up the items behind it,
// and Queue.Claim refuses it with a *fence.ImplausibleTokenError that
// carries the item's token, writing nothing. It becomes claimable once the
// source's clock catches up with its token, or once an operator resets its
// fence while no claim holds it. MemorySource, like fence.Memory, has no
// such bound.
type Source interface {
	// claimReady claims up to n ready items for r in one request: first
	// running items whose claim expired, then pending items whose retry
	// time has come, each in the order they became due. Every item it
	// returns is running under r's owner and nonce with a new token, its
	// attempt count went up by one, and its claim expires r.TTL after the
	// source applied the request. It returns no items and no error when
	// none is ready. After an error matching lease.ErrIndeterminate, items
	// may have been claimed by r.Nonce; their claims expire after r.TTL.
	claimReady(ctx context.Context, r claimReq, n int) ([]grant, error)

	// claimID claims item id for r as claimReady claims each item, if it
	// is pending (whatever its retry time) or running with an expired
	// claim. Otherwise nothing changes and it returns a
	// *lease.NotAcquiredError naming the holder if the item's claim is
	// current, an error matching ErrFinished if the item is done or dead,
	// or ErrNotFound if the source does not know id.
	claimID(ctx context.Context, r claimReq, id string) (grant, error)

	// renewClaim, releaseClaim and inspectClaim are lease.Backend's Renew,
	// Release and Inspect for the claim of item id, whose lease key is
	// a.Key. A released claim leaves the item running with its attempt
	// counted, and claimable again at once. A claim ended by completeItem
	// or failItem is refused as Renew and Release refuse an expired one.
	renewClaim(ctx context.Context, id string, a lease.Acquisition, ttl time.Duration) error
	releaseClaim(ctx context.Context, id string, a lease.Acquisition) error
	inspectClaim(ctx context.Context, id string) (lease.Record, error)

	// completeItem marks the running item id done and ends its claim, if
	// its fence admits snap. Otherwise nothing changes and it returns the
	// fence's error (*fence.StaleError, *fence.ForeignLeaseError,
	// *fence.ImplausibleTokenError), an error matching ErrFinished if the
	// item is done or dead, ErrNotFound for an unknown item, or another
	// error if it is not running.
	completeItem(ctx context.Context, snap lease.Snapshot, id string) error

	// failItem records a failed attempt at the running item id and ends its
	// claim, if its fence admits snap: the item becomes dead if f.Dead, or
	// pending again and hidden for f.RetryAfter. Errors are as for
	// completeItem.
	failItem(ctx context.Context, snap lease.Snapshot, id string, f failRecord) error
}

// claimReq is what a Queue asks a source for when it claims items.
type claimReq struct {
	// KeyPrefix is the lease key of an item without its ID: item id's key
	// is KeyPrefix + the ID with '%', '{', '}' and '/' written as %25,
	// %7B, %7D and %2F (see Queue.Key). The claim records it as the
	// item's FenceKey.
	KeyPrefix string
	// Owner names the worker.
	Owner string
	// Nonce is the claim's secret, as lease.AcquireRequest's: store it,
	// never return it, log it or put it in an error. The claims of one
	// claimReady share it; each is still its own acquisition, of its own
	// key with its own token.
	Nonce string
	// TTL is how long the claim lasts, on the source's clock, unless it
	// is renewed.
	TTL time.Duration
}

// grant is one item claimed by claimReady or claimID.
type grant struct {
	// ID is the item's ID.
	ID string
	// Token is the claim's token.
	Token lease.Token
	begun
}

// begun is what a claim reports of the attempt it began.
type begun struct {
	// Attempt counts the attempts begun at the item, this one included.
	Attempt int
	// Age is how long the item had been ready when this attempt began:
	// since it was enqueued, or since its retry delay ended after a failed
	// attempt, measured on the source's clock (the database's, the Valkey
	// server's, MemorySource's Clock) within the claim's request. For an
	// item taken over from a worker whose claim expired, the time that
	// worker held it counts in. Zero when the source cannot tell, e.g. for
	// an item a producer added without its ready time, or when the
	// source's clock stepped back.
	Age time.Duration
}

// failRecord is a failed attempt, as failItem records it.
type failRecord struct {
	// Err is why the attempt failed. Sources store its text.
	Err error
	// Dead moves the item to the dead-letter state: it is never handed
	// out again.
	Dead bool
	// RetryAfter is how long the item stays hidden before it may be
	// claimed again, when not Dead.
	RetryAfter time.Duration
}

// State is the state of an item.
type State string

// The states of an item. An item is pending when enqueued, running while a
// claim's attempt is under way (or its worker died and the claim has not
// been taken over yet), and done or dead for good.
const (
	Pending State = "pending"
	Running State = "running"
	Done    State = "done"
	Dead    State = "dead"
)

// Item is an item's state as a source reports it.
type Item struct {
	ID    string
	State State
	// Attempts counts the attempts begun.
	Attempts int
	// FenceKey and Token are the item's fence: the lease key and the
	// highest token that wrote the item (empty and 0 before the first
	// attempt).
	FenceKey string
	Token    lease.Token
	// Owner is the owner string of the worker that wrote the item last.
	Owner string
	// LastError is the text of the last recorded failure, if any.
	LastError string
}

// maxLead is fence.MaxTokenLead in microseconds, as the sources count: the
// PostgreSQL statements and Valkey scripts that take a caller's token
// refuse one above the source's clock in microseconds plus maxLead, and
// their claims pass over an item whose next token would be above it.
const maxLead = int64(fence.MaxTokenLead / time.Microsecond)

// finished returns the error for an item found done or dead.
func finished(id string, s State) error {
	return fmt.Errorf("%w: item %q is %s", ErrFinished, id, s)
}

// notRunning returns the error for an item found in state s when it
// should be running.
func notRunning(id string, s State) error {
	if s == Done || s == Dead {
		return finished(id, s)
	}
	return fmt.Errorf("leasequeue: item %q is %s, not running", id, s)
}

// notFound returns the error for an unknown item.
func notFound(id string) error {
	return fmt.Errorf("%w: %q", ErrNotFound, id)
}

// millis returns d in whole milliseconds, rounded up, and never negative.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
