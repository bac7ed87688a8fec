package leasequeue

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/lease"
)

// A Claimer is a Source whose items are their own leases: claiming an item
// is one request that makes it running and records the claim's holder,
// secret, token and expiry on the item itself, with the expiry on the
// source's clock, and the item's Complete and Fail (see Source) end the
// claim in the request that writes the outcome. So an item costs one
// request to claim (or a share of one, claiming several at once) and one
// to finish, and no lease backend is involved. PostgresSource,
// ValkeySource and MemorySource are Claimers; a Queue on a Claimer uses
// it instead of Next, Begin and its client's lease backend, and renews
// its claims in the background through RenewClaim with the lease
// package's rules (see lease.Client.Adopt).
//
// The rules of lease.Backend hold for the claim of each item, under the
// item's lease key (Queue.Key): a token strictly greater than every token
// the item carried before, also after the source lost data or removed the
// finished item (see lease.Sweeper) and its ID was enqueued again, as long
// as its clock does not step back (seed it with the clock in microseconds,
// as the lease backends do); expiry on the source's clock; and the same three
// kinds of errors (nil, a refusal, or an error matching
// lease.ErrIndeterminate when the request may have been applied). Complete
// and Fail are fenced by the claim's token, as for every Source, and clear
// the claim. A Claimer must be safe for concurrent use.
//
// A token must be plausible, too (see Source.Begin): PostgresSource and
// ValkeySource grant one only if it is at most fence.MaxTokenLead ahead of
// their clock. An item whose fence already holds a token at or above that
// bound (written by a version of this package that did not refuse
// implausible tokens, or by hand) cannot get a greater plausible one:
// ClaimNext passes over it, so that it never holds up the items behind
// it, and ClaimItem refuses it with a *fence.ImplausibleTokenError that
// carries the item's token, writing nothing. It becomes claimable once
// the source's clock catches up with its token, or once an operator
// resets its fence while no claim holds it.
type Claimer interface {
	Source

	// ClaimNext claims up to n ready items for r in one request: first
	// running items whose claim expired, then pending items whose retry
	// time has come, each in the order they became due. Every item it
	// returns is running under r's owner and nonce with a new token, its
	// attempt count went up by one, and its claim expires r.TTL after the
	// source applied the request. It returns no items and no error when
	// none is ready. After an error matching lease.ErrIndeterminate, items
	// may have been claimed by r.Nonce; their claims expire after r.TTL.
	ClaimNext(ctx context.Context, r ClaimRequest, n int) ([]Granted, error)

	// ClaimItem claims item id for r as ClaimNext claims each item, if it
	// is pending (whatever its retry time) or running with an expired
	// claim. Otherwise nothing changes and it returns a
	// *lease.NotAcquiredError naming the holder if the item's claim is
	// current, an error matching ErrFinished if the item is done or dead,
	// or ErrNotFound if the source does not know id.
	ClaimItem(ctx context.Context, r ClaimRequest, id string) (Granted, error)

	// RenewClaim, ReleaseClaim and InspectClaim are lease.Backend's Renew,
	// Release and Inspect for the claim of item id, whose lease key is
	// a.Key. A released claim leaves the item running with its attempt
	// counted, and claimable again at once. A claim ended by Complete or
	// Fail is refused as Renew and Release refuse an expired one.
	RenewClaim(ctx context.Context, id string, a lease.Acquisition, ttl time.Duration) error
	ReleaseClaim(ctx context.Context, id string, a lease.Acquisition) error
	InspectClaim(ctx context.Context, id string) (lease.Record, error)
}

// ClaimRequest is what a Queue passes to Claimer.ClaimNext and ClaimItem.
type ClaimRequest struct {
	// KeyPrefix is the lease key of an item without its ID: item id's key
	// is KeyPrefix + the ID with '%', '{', '}' and '/' written as %25,
	// %7B, %7D and %2F (see Queue.Key). The claim records it as the
	// item's FenceKey.
	KeyPrefix string
	// Owner names the worker.
	Owner string
	// Nonce is the claim's secret, as lease.AcquireRequest's: store it,
	// never return it, log it or put it in an error. The claims of one
	// ClaimNext share it; each is still its own acquisition, of its own
	// key with its own token.
	Nonce string
	// TTL is how long the claim lasts, on the source's clock, unless it
	// is renewed.
	TTL time.Duration
}

// Granted is one item claimed by Claimer.ClaimNext or ClaimItem.
type Granted struct {
	// ID is the item's ID.
	ID string
	// Token is the claim's token.
	Token lease.Token
	// Begun reports the attempt the claim began, as Source.Begin does.
	Begun
}

// errNotClaimer is what an item backend says to Acquire: the claims of a
// Claimer are granted by ClaimNext and ClaimItem only.
var errNotClaimer = errors.New("leasequeue: the claims of items are granted by Claimer.ClaimNext and ClaimItem, not by Acquire")

// itemBackend is the lease.Backend of the claims of a Claimer's items,
// under the lease keys prefix + escaped ID, which the queue's items client
// renews and releases.
type itemBackend struct {
	src    Claimer
	prefix string
}

var _ lease.Backend = itemBackend{}

// id returns the ID of the item whose lease key is key.
func (b itemBackend) id(key string) (string, error) {
	if rest, ok := strings.CutPrefix(key, b.prefix); ok {
		if id, ok := keyspace.Unescape(rest); ok {
			return id, nil
		}
	}
	return "", fmt.Errorf("leasequeue: %q is not the lease key of an item of this queue", key)
}

func (b itemBackend) Acquire(context.Context, lease.AcquireRequest) (lease.Token, error) {
	return 0, errNotClaimer
}

func (b itemBackend) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	id, err := b.id(a.Key)
	if err != nil {
		return err
	}
	return b.src.RenewClaim(ctx, id, a, ttl)
}

func (b itemBackend) Release(ctx context.Context, a lease.Acquisition) error {
	id, err := b.id(a.Key)
	if err != nil {
		return err
	}
	return b.src.ReleaseClaim(ctx, id, a)
}

func (b itemBackend) Inspect(ctx context.Context, key string) (lease.Record, error) {
	id, err := b.id(key)
	if err != nil {
		return lease.Record{}, err
	}
	r, err := b.src.InspectClaim(ctx, id)
	r.Key = key
	return r, err
}

// claimRequest returns the request of a claim with a fresh secret, from
// crypto/rand.Text: 130 bits, the form lease.Client's acquisition secrets
// have (the client draws its own in batches). One request claims every
// item of a ClaimNext, so a secret is drawn per request, not per item.
func (q *Queue) claimRequest() ClaimRequest {
	return ClaimRequest{KeyPrefix: q.keyPrefix(), Owner: q.client.Owner(), Nonce: rand.Text(), TTL: q.o.Policy.TTL()}
}

// adopt opens the claim g granted to r by a request sent at sent;
// detached is ctx without its cancellation.
func (q *Queue) adopt(ctx, detached context.Context, r ClaimRequest, g Granted, sent time.Time) (*Claim, error) {
	a := lease.Acquisition{Key: q.Key(g.ID), Owner: r.Owner, Nonce: r.Nonce, Token: g.Token}
	h, err := q.items.Adopt(a, q.o.Policy, sent)
	if err != nil {
		// Not adoptable (most often: the local deadline passed while the
		// claim was granted): give it back at once, bounded by
		// OperationTimeout, so that the item is not held until it expires.
		rctx, cancel := context.WithTimeout(detached, q.o.Policy.Options().OperationTimeout)
		_ = q.claimer.ReleaseClaim(rctx, g.ID, a)
		cancel()
		return nil, err
	}
	return q.open(ctx, detached, h, g.ID, g.Begun, sent)
}

// claimNext claims up to n ready items of the Claimer in one request,
// unless the worker is unhealthy; detached is ctx without its
// cancellation.
func (q *Queue) claimNext(ctx, detached context.Context, n int) []*Claim {
	if !q.track.healthy(q.clock.Now()) {
		return nil
	}
	sent := q.clock.Now()
	r := q.claimRequest()
	gs, err := q.claimer.ClaimNext(ctx, r, n)
	if err != nil {
		if ctx.Err() == nil {
			q.emit(&Claimed{EventInfo: EventInfo{Name: q.o.Name, Worker: q.client.Owner(), Err: fmt.Errorf("leasequeue: claim ready items: %w", err)}})
		}
		return nil
	}
	cs := make([]*Claim, 0, len(gs))
	for _, g := range gs {
		c, err := q.adopt(ctx, detached, r, g, sent)
		switch {
		case err == nil:
			cs = append(cs, c)
		case errors.Is(err, ErrFinished):
			// Moved to the dead-letter state: its workers died too often.
		default:
			q.emit(&Claimed{EventInfo: EventInfo{Name: q.o.Name, Worker: q.client.Owner(), ID: g.ID, Key: q.Key(g.ID), Err: err}})
		}
	}
	return cs
}

// escapeID returns item id as its lease key ends (see Queue.Key).
func escapeID(id string) string { return keyspace.Escape(id) }
