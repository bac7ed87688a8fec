package leasequeue

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golib/lease/lease"
)

var _ lease.Sweeper = (*MemorySource)(nil)

// Sweep implements lease.Sweeper: it removes the done items that were
// completed more than MemoryOptions.DoneRetention ago, then the dead items
// that died more than DeadRetention ago, on the source's clock, and
// returns their IDs, in the order they finished. Pending and running items
// are never removed, also a running item whose claim expired, which its
// worker may still complete. The source remembers the highest token of
// the items it removed, and claims count up from above it: so a claim of
// an item enqueued again under a removed ID gets a token above every
// token the removed item carried. Enqueue then adds the ID as a new item.
func (s *MemorySource) Sweep(_ context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
	state, pos, ok, err := s.retention.start(o.Cursor)
	if !ok || err != nil {
		return lease.SweepPage{}, err
	}
	var after memoryFinish
	if pos != "" {
		nanos, id, ok := strings.Cut(pos, " ")
		ns, err := strconv.ParseInt(nanos, 10, 64)
		if !ok || err != nil {
			return lease.SweepPage{}, fmt.Errorf("leasequeue: sweep: %q is not a cursor of this source", o.Cursor)
		}
		after = memoryFinish{at: time.Unix(0, ns), id: id}
	}
	limit := max(o.Limit, 1)

	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff := s.clock.Now().Add(-s.retention.of(state))
	var due []memoryFinish
	for id, it := range s.items {
		f := memoryFinish{at: it.finished, id: id}
		if it.State == state && !it.finished.After(cutoff) && (pos == "" || f.compare(after) > 0) {
			due = append(due, f)
		}
	}
	slices.SortFunc(due, memoryFinish.compare)
	var page lease.SweepPage
	if len(due) > limit {
		due = due[:limit]
		last := due[limit-1]
		page.Next = sweepCursor(state, strconv.FormatInt(last.at.UnixNano(), 10)+" "+last.id)
	} else {
		page.Next = s.retention.after(state)
	}
	for _, f := range due {
		page.Removed = append(page.Removed, f.id)
		if !o.DryRun {
			s.floor = max(s.floor, s.items[f.id].mark.Token)
			delete(s.items, f.id)
		}
	}
	if !o.DryRun && len(due) > 0 {
		s.order = slices.DeleteFunc(s.order, func(id string) bool { return s.items[id] == nil })
	}
	return page, nil
}

// memoryFinish is where a finished item is in the order of a walk: by the
// time it finished, then by ID.
type memoryFinish struct {
	at time.Time
	id string
}

func (f memoryFinish) compare(g memoryFinish) int {
	if c := f.at.Compare(g.at); c != 0 {
		return c
	}
	return cmp.Compare(f.id, g.id)
}
