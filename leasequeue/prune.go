package leasequeue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue/internal/health"
)

// DefaultPruneEvery is how often, at most, Run prunes the source when
// Options.PruneEvery is 0.
const DefaultPruneEvery = time.Hour

// prunePage is how many items Prune asks a source's Sweep to visit per
// call: one statement or script each, short enough not to hold up the
// source's other requests.
const prunePage = 1000

// pruneTimeout bounds one background prune.
const pruneTimeout = 10 * time.Minute

// prunePolicy is the policy of the prune lease: Prune renews it between
// pages, so a page may take up to its TTL (less the safety margin) before
// another worker could start pruning too, which is safe, only wasted.
var prunePolicy = func() lease.Policy {
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute})
	if err != nil {
		panic(err) // a constant policy: a bug here, not bad input
	}
	return p
}()

// PruneKey returns the lease key under which the workers of the queue
// prune its source, one at a time: Name + "/prune/" (the kind "prune" of
// the package's lease keys, with nothing after it, so that it never meets
// the key of an item, a member or a partition of any queue or group).
func (q *Queue) PruneKey() string { return keyspace.LeaseKey(q.o.Name+"/", keyspace.QueuePrune, "") }

// Prune removes the finished items of the source that outlived their
// retention (see PostgresOptions.DoneRetention, ValkeyOptions and
// MemoryOptions), now, if the source is a lease.Sweeper, as the
// ready-made sources are; it returns how many it removed. It takes the
// lease PruneKey on the queue's lease client with one TryAcquire, walks
// the source's Sweep pages to the end, renewing the lease between pages,
// and releases it. If another worker is pruning, it returns at once with
// an error matching lease.ErrNotAcquired and removes nothing. ctx bounds
// the whole walk; the items removed before an error stay removed.
//
// Run calls it by itself, in the background (see Options.PruneEvery).
// Removal is safe to run from any number of workers at once (each item
// is removed by a request that checks it is still finished and past its
// retention), so the lease only saves work.
func (q *Queue) Prune(ctx context.Context) (int, error) {
	n, _, err := q.prune(ctx)
	return n, err
}

// prune is Prune, which also returns the token of the prune lease (0 if
// it was not acquired).
func (q *Queue) prune(ctx context.Context) (int, lease.Token, error) {
	sw, ok := q.src.(lease.Sweeper)
	if !ok {
		return 0, 0, nil
	}
	h, err := q.client.TryAcquire(ctx, q.PruneKey(), prunePolicy)
	if err != nil {
		return 0, 0, fmt.Errorf("leasequeue: prune %q: %w", q.o.Name, err)
	}
	n, err := sweepWalk(ctx, sw, h)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), prunePolicy.Options().OperationTimeout)
	rerr := h.Release(rctx)
	cancel()
	if err == nil && rerr != nil && !errors.Is(rerr, lease.ErrLost) {
		err = rerr
	}
	if err != nil {
		return n, h.Token(), fmt.Errorf("leasequeue: prune %q: %w", q.o.Name, err)
	}
	return n, h.Token(), nil
}

// sweepWalk walks sw to the end of its pages while h is held, and returns
// how many records it removed.
func sweepWalk(ctx context.Context, sw lease.Sweeper, h *lease.Handle) (int, error) {
	n, cursor := 0, ""
	for {
		page, err := sw.Sweep(ctx, lease.SweepOptions{Cursor: cursor, Limit: prunePage})
		n += len(page.Removed)
		if err != nil || page.Next == "" {
			return n, err
		}
		cursor = page.Next
		if err := h.Renew(ctx); err != nil {
			return n, err
		}
	}
}

// pruning reports whether Run prunes the source in the background.
func (q *Queue) pruning() bool {
	_, ok := q.src.(lease.Sweeper)
	return ok && q.o.PruneEvery > 0
}

// pruneLoop prunes the source about every PruneEvery until ctx ends: the
// first time between half of and one PruneEvery after it starts, so that
// a short-lived worker does not prune and workers started together do
// not all try at once.
func (q *Queue) pruneLoop(ctx context.Context) {
	every := q.o.PruneEvery
	wait := every/2 + rand.N(every/2+1)
	for health.Sleep(ctx, q.clock, wait) == nil {
		q.pruneOnce(ctx)
		wait = every
	}
}

// pruneOnce prunes the source once, and reports it with a Pruned event,
// unless another worker was pruning or ctx ended.
func (q *Queue) pruneOnce(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, pruneTimeout)
	defer cancel()
	start := q.clock.Now()
	n, tok, err := q.prune(pctx)
	if errors.Is(err, lease.ErrNotAcquired) || (ctx.Err() != nil && n == 0) {
		return
	}
	q.emit(&Pruned{EventInfo: EventInfo{Name: q.o.Name, Worker: q.client.Owner(), Key: q.PruneKey(), Token: tok,
		Latency: q.clock.Now().Sub(start), Err: err}, Removed: n})
}
