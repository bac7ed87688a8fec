package leasequeue

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golib/lease/internal/applied"
	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/lease"
)

// maxBatch bounds the completions one statement carries.
const maxBatch = 128

// completer sends overlapping Complete calls of one PostgresSource as one
// statement, as a database sends overlapping commits as one WAL flush.
//
// One completion statement of a source is in flight at a time. A
// Complete that finds none in flight sends its own at once, on its own
// goroutine and context, with complete.sql: exactly what a lone Complete
// always did. Completions that find one in flight gather, and go out
// together in one statement (complete_batch.sql), on a goroutine of the
// completer's, as soon as it returns. Batching adds no waiting of its
// own: no timer, no batch size to reach. Its cost is that a statement
// that hangs (a connection that died without a word, say) holds up the
// completions behind it until their contexts end, where without batching
// only its own would wait.
//
// The batch statement checks each item's fence as complete.sql does. An
// item it did not mark done is explained by its own Complete call, on its
// own context, as a refused complete.sql is. If the server refuses the
// whole statement, each Complete sends complete.sql alone, so that each
// gets its own answer.
//
// A batch runs under a context that keeps the values of its first
// completion's context, has the latest of their deadlines (none if one of
// them has none), and ends when every Complete of the batch has stopped
// waiting. A Complete whose context ends stops waiting: if its completion
// was not sent yet, it is dropped and Complete returns the context's
// error, nothing written; if it was sent, Complete returns an error
// matching lease.ErrIndeterminate, as for a lone statement cut off by its
// context.
type completer struct {
	mu      sync.Mutex
	lone    bool          // a lone completion statement is in flight
	busy    bool          // a batch is in flight, or about to be sent
	pending []*completion // waiting for the next batch
}

// A completion is one Complete call waiting for a batch.
type completion struct {
	ctx  context.Context
	snap lease.Snapshot
	id   string
	sent *batchRun // the batch that carries it, once sent

	// The answer, set before done is closed: err, or, if err is nil,
	// whether the batch marked the item done, or whether the server
	// refused the whole batch (alone: send complete.sql alone).
	err         error
	done, alone bool
	answered    chan struct{}
}

// batchRun is one batch statement in flight: its cancel, and how many of
// its completions still wait for it.
type batchRun struct {
	waiting atomic.Int32
	cancel  context.CancelFunc
}

// leave records that one waiter of r stopped waiting, and ends the
// statement's context when none is left.
func (r *batchRun) leave() {
	if r.waiting.Add(-1) == 0 {
		r.cancel()
	}
}

// completeBatched marks the running item id done under snap, in a batch
// with the completions that overlap it.
func (s *PostgresSource) completeBatched(ctx context.Context, snap lease.Snapshot, id string) error {
	if err := checkToken(snap); err != nil {
		return err
	}
	b := &s.batch
	b.mu.Lock()
	if !b.lone && !b.busy {
		b.lone = true
		b.mu.Unlock()
		err := s.finish(ctx, s.db, snap, id, s.complete)
		b.mu.Lock()
		b.lone = false
		s.startBatches()
		b.mu.Unlock()
		return err
	}
	c := &completion{ctx: ctx, snap: snap, id: id, answered: make(chan struct{})}
	b.pending = append(b.pending, c)
	if !b.lone {
		s.startBatches()
	}
	b.mu.Unlock()

	select {
	case <-c.answered:
		return s.outcome(c)
	case <-ctx.Done():
	}
	b.mu.Lock()
	if i := slices.Index(b.pending, c); i >= 0 {
		b.pending = slices.Delete(b.pending, i, i+1)
		b.mu.Unlock()
		return notSent(id, ctx)
	}
	r := c.sent
	b.mu.Unlock()
	select {
	case <-c.answered: // the answer came meanwhile
		return s.outcome(c)
	default:
	}
	r.leave()
	return lease.Indeterminate(fmt.Errorf("leasequeue: postgres: finish %q: %w", id, context.Cause(ctx)))
}

// notSent is the error of a completion whose context ended before it was
// sent.
func notSent(id string, ctx context.Context) error {
	return pgplumbing.NotSent(fmt.Errorf("leasequeue: postgres: finish %q: not sent: %w", id, context.Cause(ctx)))
}

// outcome turns c's answer into Complete's result, on the caller's
// goroutine and context.
func (s *PostgresSource) outcome(c *completion) error {
	switch {
	case c.err != nil:
		return c.err
	case c.done:
		return nil
	case c.alone:
		return s.finish(c.ctx, s.db, c.snap, c.id, s.complete)
	}
	return s.refusal(c.ctx, s.db, c.snap, c.id)
}

// startBatches starts sending the pending completions, unless a batch is
// in flight already. The caller holds s.batch.mu.
func (s *PostgresSource) startBatches() {
	if b := &s.batch; len(b.pending) > 0 && !b.busy {
		b.busy = true
		go s.runBatches()
	}
}

// runBatches sends batches until no completion waits.
func (s *PostgresSource) runBatches() {
	b := &s.batch
	for {
		b.mu.Lock()
		batch := b.take()
		if len(batch) == 0 {
			b.busy = false
			b.mu.Unlock()
			return
		}
		ctx, r := batchContext(batch)
		for _, c := range batch {
			c.sent = r
		}
		b.mu.Unlock()
		s.sendBatch(ctx, batch)
		r.cancel()
	}
}

// take takes up to maxBatch pending completions, no item twice (a later
// completion of the same item waits for the next batch). The caller holds
// b.mu.
func (b *completer) take() []*completion {
	var batch, rest []*completion
	for _, c := range b.pending {
		if len(batch) == maxBatch || slices.ContainsFunc(batch, func(o *completion) bool { return o.id == c.id }) {
			rest = append(rest, c)
			continue
		}
		batch = append(batch, c)
	}
	b.pending = rest
	return batch
}

// batchContext returns the context of a batch statement (see completer)
// and the batch's batchRun.
func batchContext(batch []*completion) (context.Context, *batchRun) {
	ctx := context.WithoutCancel(batch[0].ctx)
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	var cancel context.CancelFunc
	if latest.IsZero() {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithDeadline(ctx, latest)
	}
	r := &batchRun{cancel: cancel}
	r.waiting.Store(int32(len(batch)))
	return ctx, r
}

// sendBatch sends one batch and answers each of its completions.
func (s *PostgresSource) sendBatch(ctx context.Context, batch []*completion) {
	var done []string
	var err error
	if len(batch) == 1 {
		c := batch[0]
		done, err = s.completeOne(ctx, c.snap, c.id)
	} else {
		done, err = s.completeMany(ctx, batch)
	}
	outcome := pgplumbing.Classify(err)
	for _, c := range batch {
		switch outcome {
		case applied.Yes:
			c.done = slices.Contains(done, c.id)
		case applied.No:
			c.alone = true
		default:
			c.err = pgError("finish", c.id, err) // unknown: marked indeterminate
		}
		close(c.answered)
	}
}

// completeOne runs complete.sql for one item and returns its ID if it
// marked the item done.
func (s *PostgresSource) completeOne(ctx context.Context, snap lease.Snapshot, id string) ([]string, error) {
	tag, err := s.db.Exec(ctx, s.complete, s.queueArg, id, snap.Key, int64(snap.Token), snap.Owner, maxLead)
	if err != nil || tag.RowsAffected() == 0 {
		return nil, err
	}
	return []string{id}, nil
}

// completeMany runs complete_batch.sql and returns the IDs it marked done.
func (s *PostgresSource) completeMany(ctx context.Context, batch []*completion) ([]string, error) {
	ids, keys, owners := make([]string, len(batch)), make([]string, len(batch)), make([]string, len(batch))
	tokens := make([]int64, len(batch))
	for i, c := range batch {
		ids[i], keys[i], tokens[i], owners[i] = c.id, c.snap.Key, int64(c.snap.Token), c.snap.Owner
	}
	rows, err := s.db.Query(ctx, s.completeBatch, s.queueArg, ids, keys, tokens, owners, maxLead)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	done := make([]string, 0, len(batch))
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		done = append(done, id)
	}
	return done, rows.Err()
}
