package leasequeue

import (
	"context"
	"sync"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// MemoryOptions configure a MemorySource. The zero value is valid.
type MemoryOptions struct {
	// Clock tells time for hiding items; use the lease client's. Default
	// lease.SystemClock().
	Clock lease.Clock
}

// MemorySource is a Source and a Claimer in the memory of one process,
// fenced by a fence.Memory: the reference implementation of the Source and
// Claimer rules, for tests, examples and single-process programs. Its
// claims' tokens count up from the item's fence, as the memory lease
// backend's do (the source is lost with the process, so there is no
// restore to outlive). Next and ClaimNext hand out running items whose claim may have expired
// first, then pending ones, each in the order they were enqueued. It is
// safe for concurrent use, and is lost with the process.
type MemorySource struct {
	clock lease.Clock
	fence fence.Memory

	mu    sync.Mutex
	items map[string]*memoryItem
	order []string // IDs in the order they were enqueued
}

type memoryItem struct {
	Item
	visible time.Time // for a claimed item, when its claim expires
	ready   time.Time // when it was enqueued, or its retry delay ends
	nonce   string    // the secret of the item's claim (Claimer), if any
}

var _ Source = (*MemorySource)(nil)

// NewMemorySource returns an empty MemorySource.
func NewMemorySource(o MemoryOptions) *MemorySource {
	if o.Clock == nil {
		o.Clock = lease.SystemClock()
	}
	return &MemorySource{clock: o.Clock, items: make(map[string]*memoryItem)}
}

// Enqueue adds pending items with the given IDs, ready at once, and
// returns how many were added: an ID the source already has, in any
// state, is left alone. IDs must be valid fence resource names (see
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
	it := s.items[id]
	s.mu.Unlock()
	if it == nil {
		return Item{}, false
	}
	m := s.fence.Mark(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := it.Item
	out.FenceKey, out.Token = m.Key, m.Token
	return out, true
}

// Next implements Source.
func (s *MemorySource) Next(_ context.Context, n int, hide time.Duration) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	var out []string
	for _, state := range []State{Running, Pending} { // rescues first
		for _, id := range s.order {
			if len(out) >= n {
				break
			}
			if it := s.items[id]; it.State == state && !now.Before(it.visible) {
				// An expired claim is over: hiding the item must not
				// renew it.
				it.visible, it.nonce = now.Add(hide), ""
				out = append(out, id)
			}
		}
	}
	return out, nil
}

// Begin implements Source.
func (s *MemorySource) Begin(_ context.Context, snap lease.Snapshot, id string, hide time.Duration) (Begun, error) {
	var b Begun
	err := s.fence.Do(snap, []string{id}, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		it := s.items[id]
		switch {
		case it == nil:
			return notFound(id)
		case it.State == Done || it.State == Dead:
			return finished(id, it.State)
		}
		it.State, it.Owner = Running, snap.Owner
		it.Attempts++
		now := s.clock.Now()
		it.visible = now.Add(hide)
		b = Begun{Attempt: it.Attempts, Age: max(now.Sub(it.ready), 0)}
		return nil
	})
	return b, err
}

// Complete implements Source.
func (s *MemorySource) Complete(_ context.Context, snap lease.Snapshot, id string) error {
	return s.finish(snap, id, func(it *memoryItem) {
		it.State, it.LastError = Done, ""
	})
}

// Fail implements Source.
func (s *MemorySource) Fail(_ context.Context, snap lease.Snapshot, id string, f Failure) error {
	return s.finish(snap, id, func(it *memoryItem) {
		it.State = Pending
		if f.Dead {
			it.State = Dead
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
	return s.fence.Do(snap, []string{id}, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		it := s.items[id]
		switch {
		case it == nil:
			return notFound(id)
		case it.State != Running:
			return notRunning(id, it.State)
		}
		it.Owner, it.nonce = snap.Owner, ""
		end(it)
		return nil
	})
}

// Defer implements Source.
func (s *MemorySource) Defer(_ context.Context, id string, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.items[id]; it != nil && it.nonce == "" { // never moves a claim's expiry
		it.visible = s.clock.Now().Add(d)
	}
	return nil
}
