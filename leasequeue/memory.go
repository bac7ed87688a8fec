package leasequeue

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// MemoryOptions configure a MemorySource. The zero value is valid.
type MemoryOptions struct {
	// Clock tells time for hiding items and for their retention; use the
	// lease client's. Default lease.SystemClock().
	Clock lease.Clock

	// DoneRetention is how long the source keeps a done item after it was
	// completed, on Clock, before Sweep removes it. Default
	// DefaultDoneRetention (24 hours); lease.KeepForever (any negative
	// value) keeps done items for good.
	DoneRetention time.Duration
	// DeadRetention is how long the source keeps a dead item after it went
	// to the dead-letter state, as DoneRetention. Default
	// DefaultDeadRetention (7 days).
	DeadRetention time.Duration
}

// MemorySource is a Source in the memory of one process, each item
// fenced by a fence.Mark kept with it (the rule of fence.Memory): the
// reference implementation of the Source rules, for tests, examples and single-process programs. Its claims'
// tokens count up from the item's fence, as the memory lease backend's do
// (the source is lost with the process, so there is no restore to
// outlive), and from above every token of an item Sweep removed. Its claims
// take running items whose claim may have expired first,
// then pending ones, each in the order they were enqueued. It is safe for
// concurrent use, and is lost with the process.
type MemorySource struct {
	clock     lease.Clock
	retention retention

	mu    sync.Mutex
	items map[string]*memoryItem
	order []string    // IDs in the order they were enqueued
	floor lease.Token // the highest token of an item Sweep removed
}

type memoryItem struct {
	Item
	mark     fence.Mark // the item's fence
	visible  time.Time  // for a claimed item, when its claim expires
	ready    time.Time  // when it was enqueued, or its retry delay ends
	finished time.Time  // when it became done or dead
	nonce    string     // the secret of the item's claim , if any
}

var _ Source = (*MemorySource)(nil)

// NewMemorySource returns an empty MemorySource.
func NewMemorySource(o MemoryOptions) *MemorySource {
	if o.Clock == nil {
		o.Clock = lease.SystemClock()
	}
	return &MemorySource{clock: o.Clock, retention: newRetention(o.DoneRetention, o.DeadRetention), items: make(map[string]*memoryItem)}
}

// Enqueue adds pending items with the given IDs, ready at once, and
// returns how many were added: an ID the source already has, in any
// state, is left alone. A finished item is kept until Sweep removes it
// after its retention; from then on its ID is new again (see Sweep). IDs must be valid fence resource names (see
// fence.ValidateResource); Enqueue panics otherwise.
func (s *MemorySource) Enqueue(ids ...string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, id := range ids {
		if err := fence.ValidateResource(id); err != nil {
			panic(err)
		}
		if s.items[id] != nil {
			continue
		}
		now := s.clock.Now()
		s.items[id] = &memoryItem{Item: Item{ID: id, State: Pending}, visible: now, ready: now}
		s.order = append(s.order, id)
		n++
	}
	return n
}

// Item returns the state of item id, and false if the source does not
// know it.
func (s *MemorySource) Item(id string) (Item, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[id]
	if it == nil {
		return Item{}, false
	}
	out := it.Item
	out.FenceKey, out.Token = it.mark.Key, it.mark.Token
	return out, true
}

// fenced applies write to item id under snap, as fence.Memory.Do does
// with the item's mark: if the mark admits snap, write is called, and the
// mark moves to snap if write returns nil. It returns an error wrapping
// fence.ErrInvalid for a snapshot without a token or a valid key,
// ErrNotFound for an unknown item, and the mark's refusal.
func (s *MemorySource) fenced(snap lease.Snapshot, id string, write func(*memoryItem) error) error {
	if snap.Token == 0 {
		return fmt.Errorf("%w: leasequeue: item %q: snapshot of lease %q has no token", fence.ErrInvalid, id, snap.Key)
	}
	if err := lease.ValidateKey(snap.Key); err != nil {
		return fmt.Errorf("%w: leasequeue: item %q: %w", fence.ErrInvalid, id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[id]
	if it == nil {
		return notFound(id)
	}
	next, err := it.mark.Admit(id, snap)
	if err != nil {
		return err
	}
	if err := write(it); err != nil {
		return err
	}
	it.mark = next
	return nil
}

// completeItem implements Source.
func (s *MemorySource) completeItem(_ context.Context, snap lease.Snapshot, id string) error {
	return s.finish(snap, id, func(it *memoryItem) {
		it.State, it.LastError, it.finished = Done, "", s.clock.Now()
	})
}

// failItem implements Source.
func (s *MemorySource) failItem(_ context.Context, snap lease.Snapshot, id string, f failRecord) error {
	return s.finish(snap, id, func(it *memoryItem) {
		it.State = Pending
		if f.Dead {
			it.State, it.finished = Dead, s.clock.Now()
		}
		if f.Err != nil {
			it.LastError = f.Err.Error()
		}
		it.visible = s.clock.Now().Add(f.RetryAfter)
		it.ready = it.visible
	})
}

// finish applies end to the running item id, fenced by snap.
func (s *MemorySource) finish(snap lease.Snapshot, id string, end func(*memoryItem)) error {
	return s.fenced(snap, id, func(it *memoryItem) error {
		if it.State != Running {
			return notRunning(id, it.State)
		}
		it.Owner, it.nonce = snap.Owner, ""
		end(it)
		return nil
	})
}
