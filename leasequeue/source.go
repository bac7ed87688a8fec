package leasequeue

import (
	"context"
	"fmt"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// A Source holds the items of one queue. It hands out the IDs of items
// that may be ready, and records the start and the outcome of each attempt
// with writes fenced by the item's lease token (see package fence), so that
// a worker that lost its claim can no longer change the item.
//
// PostgresSource, ValkeySource and MemorySource are ready-made sources. A
// Source of your own must keep the rules below; the queue calls it from
// many goroutines at once.
type Source interface {
	// Next returns up to n IDs of items that may be claimed now: pending
	// items whose retry time has come, and running items whose claim may
	// have expired. It hides each ID it returns from other calls of Next
	// for hide, so that workers polling at the same time get different
	// items. It returns no IDs and no error when none is ready. It never
	// changes an item's state. It may return the ID of an item that turns
	// out to be finished (ValkeySource does for an item enqueued twice, or
	// claimed with Queue.Claim before Next handed it out); Begin then
	// reports ErrFinished.
	Next(ctx context.Context, n int, hide time.Duration) ([]string, error)

	// Begin records the start of an attempt at item id under the lease
	// snap, if the item's fence admits snap (see fence.Mark.Admit): the
	// item becomes running, its fence moves to snap, its attempt count
	// goes up by one and is returned with the item's age (see Begun), and
	// it is hidden from Next for hide. Otherwise nothing changes and Begin
	// returns a *fence.StaleError or *fence.ForeignLeaseError, an error
	// matching ErrFinished if the item is done or dead, or ErrNotFound if
	// the source does not know id.
	//
	// A source with a clock refuses, as the fences do, a token more than
	// fence.MaxTokenLead ahead of it with a *fence.ImplausibleTokenError
	// (matching fence.ErrImplausibleToken), in Begin, Complete and Fail:
	// no backend can have issued such a token, so it comes from a forged
	// or corrupted snapshot, and as the item's fence it would refuse every
	// later claim. PostgresSource and ValkeySource do, checking it on
	// their own clock in the request that would write the token;
	// MemorySource, like fence.Memory, has no such bound.
	Begin(ctx context.Context, snap lease.Snapshot, id string, hide time.Duration) (Begun, error)

	// Complete marks the running item id done, if its fence admits snap.
	// Otherwise nothing changes and it returns the fence's error, an error
	// matching ErrFinished if the item is done or dead, or another error if
	// it is not running.
	Complete(ctx context.Context, snap lease.Snapshot, id string) error

	// Fail records a failed attempt at the running item id, if its fence
	// admits snap: the item becomes dead if f.Dead, or pending again and
	// hidden from Next for f.RetryAfter. Errors are as for Complete.
	Fail(ctx context.Context, snap lease.Snapshot, id string, f Failure) error

	// Defer hides item id from Next for d: the queue calls it when another
	// worker holds the item's lease for another d, and with d = 0 to show
	// an item again at once after its claim was released. It is a hint: it
	// never changes an item's state, and an unknown or finished id is no
	// error.
	Defer(ctx context.Context, id string, d time.Duration) error
}

// Begun is what Source.Begin reports of the attempt it recorded.
type Begun struct {
	// Attempt counts the attempts begun at the item, this one included.
	Attempt int
	// Age is how long the item had been ready when this attempt began:
	// since it was enqueued, or since its retry delay ended after a failed
	// attempt, measured on the source's clock (the database's, the Valkey
	// server's, MemorySource's Clock) by Begin, within the requests it
	// makes anyway. For an item taken over from a worker whose claim
	// expired, the time that worker held it counts in. Zero when the
	// source cannot tell, e.g. for an item a producer added without its
	// ready time, or when the source's clock stepped back.
	Age time.Duration
}

// Failure is a failed attempt, as recorded by Source.Fail.
type Failure struct {
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
