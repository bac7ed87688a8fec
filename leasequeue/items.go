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

// errNotClaimer is what an item backend says to Acquire: the claims of
// items are granted by the sources' claims only.
var errNotClaimer = errors.New("leasequeue: the claims of items are granted by the queue's claims, not by Acquire")

// itemBackend adapts the claims of a source's items to lease.Backend,
// under the lease keys prefix + escaped ID, so that the queue's items
// client renews and releases them with lease.Managed's rules. It never
// acquires: a claim is granted by the source and adopted (see Queue.adopt).
type itemBackend struct {
	src    Source
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
	return b.src.renewClaim(ctx, id, a, ttl)
}

func (b itemBackend) Release(ctx context.Context, a lease.Acquisition) error {
	id, err := b.id(a.Key)
	if err != nil {
		return err
	}
	return b.src.releaseClaim(ctx, id, a)
}

func (b itemBackend) Inspect(ctx context.Context, key string) (lease.Record, error) {
	id, err := b.id(key)
	if err != nil {
		return lease.Record{}, err
	}
	r, err := b.src.inspectClaim(ctx, id)
	r.Key = key
	return r, err
}

// claimRequest returns the request of a claim with a fresh secret, from
// crypto/rand.Text: 130 bits, the form lease.Client's acquisition secrets
// have (the client draws its own in batches). One request claims every
// item of a claimReady, so a secret is drawn per request, not per item.
func (q *Queue) claimRequest() claimReq {
	return claimReq{KeyPrefix: q.keyPrefix(), Owner: q.client.Owner(), Nonce: rand.Text(), TTL: q.o.Policy.TTL()}
}

// adopt opens the claim g granted to r by a request sent at sent;
// detached is ctx without its cancellation.
func (q *Queue) adopt(ctx, detached context.Context, r claimReq, g grant, sent time.Time) (*Claim, error) {
	a := lease.Acquisition{Key: q.Key(g.ID), Owner: r.Owner, Nonce: r.Nonce, Token: g.Token}
	h, err := q.items.Adopt(a, q.o.Policy, sent)
	if err != nil {
		// Not adoptable (most often: the local deadline passed while the
		// claim was granted): give it back at once, bounded by
		// OperationTimeout, so that the item is not held until it expires.
		rctx, cancel := context.WithTimeout(detached, q.o.Policy.Options().OperationTimeout)
		_ = q.src.releaseClaim(rctx, g.ID, a)
		cancel()
		return nil, err
	}
	return q.open(ctx, detached, h, g.ID, g.begun, sent)
}

// ClaimNext claims up to n ready items in one request, as Run does, for a
// worker loop of your own: first items whose claim expired, then pending
// items whose retry time has come, each in the order it became due. Each
// claim must be ended with Complete, Fail or Release. It returns no claims
// and no error when no item is ready, and ErrUnhealthy, claiming nothing,
// while a renewal of one of the queue's claims is overdue. An item claimed
// in the request that cannot be handed out (moved to the dead-letter
// state because this attempt would exceed MaxAttempts, or a claim whose
// local deadline passed meanwhile) is left out, and reported to the
// Observer unless it went to the dead-letter state. After an error
// matching lease.ErrIndeterminate, items may have been claimed; their
// claims expire after the policy's TTL. n less than 1 counts as 1.
func (q *Queue) ClaimNext(ctx context.Context, n int) ([]*Claim, error) {
	return q.claimNext(ctx, detach(ctx), max(n, 1))
}

// claimNext claims up to n ready items as ClaimNext does; detached is ctx
// without its cancellation.
func (q *Queue) claimNext(ctx, detached context.Context, n int) ([]*Claim, error) {
	if !q.track.Healthy(q.clock.Now()) {
		return nil, ErrUnhealthy
	}
	sent := q.clock.Now()
	r := q.claimRequest()
	gs, err := q.src.claimReady(ctx, r, n)
	if err != nil {
		return nil, fmt.Errorf("leasequeue: claim ready items: %w", err)
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
	return cs, nil
}

// escapeID returns item id as its lease key ends (see Queue.Key).
func escapeID(id string) string { return keyspace.Escape(id) }
