package leasequeue

import (
	"context"
	"fmt"
	"strconv"

	"github.com/golib/lease/lease"
)

var _ lease.Sweeper = (*ValkeySource)(nil)

// Sweep implements lease.Sweeper: it removes the queue's done items that
// were completed more than ValkeyOptions.DoneRetention ago, then its dead
// items that died more than DeadRetention ago, on the server's clock, and
// returns their IDs. It never scans the keyspace: the scripts that finish
// an item score it in the done or the dead set (P{Q}:done, P{Q}:dead, in
// the queue's hash slot) by the time it finished, and each page is one
// script (see lua/prune.lua) that visits up to o.Limit IDs of a set
// scored at least the retention ago and removes each item after checking
// its own state, finish time and token. Pending and running items are
// never removed, also a running item whose claim expired, which its
// worker may still complete.
//
// An item is removed only once its token is below the server's clock in
// microseconds, which it is by then unless its token came from a clock
// ahead of the server's (a token written by hand or by an older version);
// so a claim of an item enqueued again under a removed ID,
// whose token is at least the clock (see Source), gets a token above
// every token the removed item carried. Enqueue then adds the ID as a new
// item. An item completed with commands (CompleteClaimWith) keeps its fence,
// which guards those commands' keys too; keys made with ItemKey are yours
// and stay.
//
// Done items completed by a release from before the done set existed are
// not in it, and stay; dead items are, whatever the release.
func (s *ValkeySource) Sweep(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
	state, pos, ok, err := s.retention.start(o.Cursor)
	if !ok || err != nil {
		return lease.SweepPage{}, err
	}
	offset := 0
	if pos != "" {
		if offset, err = strconv.Atoi(pos); err != nil || offset < 0 {
			return lease.SweepPage{}, fmt.Errorf("leasequeue: sweep: %q is not a cursor of this source", o.Cursor)
		}
	}
	index, dry := s.done, "0"
	if state == Dead {
		index = s.dead
	}
	if o.DryRun {
		dry = "1"
	}
	limit := max(o.Limit, 1)
	arr, err := s.scripts.prune.Exec(ctx, s.client, []string{index, s.due, s.since},
		[]string{s.items, string(state), strconv.FormatInt(millis(s.retention.of(state)), 10),
			strconv.Itoa(offset), strconv.Itoa(limit), dry}).ToArray()
	if err != nil {
		return lease.SweepPage{}, valkeyError("prune", s.queue, err)
	}
	if len(arr) == 0 {
		return lease.SweepPage{}, lease.Indeterminate(fmt.Errorf("leasequeue: valkey: prune %q: empty reply", s.queue))
	}
	visited, err := arr[0].AsInt64()
	if err != nil {
		return lease.SweepPage{}, lease.Indeterminate(fmt.Errorf("leasequeue: valkey: prune %q: unexpected reply: %w", s.queue, err))
	}
	var page lease.SweepPage
	for _, m := range arr[1:] {
		id, err := m.ToString()
		if err != nil {
			return page, lease.Indeterminate(fmt.Errorf("leasequeue: valkey: prune %q: unexpected reply: %w", s.queue, err))
		}
		page.Removed = append(page.Removed, id)
	}
	switch {
	case visited < int64(limit):
		page.Next = s.retention.after(state)
	case o.DryRun:
		// Nothing moved: the next page begins after this one.
		page.Next = sweepCursor(state, strconv.Itoa(offset+int(visited)))
	default:
		// Every ID visited left the range (see lua/prune.lua): the next
		// page begins where this one did.
		page.Next = sweepCursor(state, strconv.Itoa(offset))
	}
	return page, nil
}
