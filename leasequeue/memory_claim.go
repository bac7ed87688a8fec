package leasequeue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// errTaken says that an item stopped being claimable before it was
// claimed.
var errTaken = errors.New("leasequeue: item taken")

// claimReady implements Source.
func (s *MemorySource) claimReady(_ context.Context, r claimReq, n int) ([]grant, error) {
	s.mu.Lock()
	now := s.clock.Now()
	var ids []string
	for _, state := range []State{Running, Pending} { // rescues first
		// In the order the items became due (claims expired, retry times
		// came), as the Source contract says; enqueue order among equals.
		var due []string
		for _, id := range s.order {
			if it := s.items[id]; it.State == state && !now.Before(it.visible) {
				due = append(due, id)
			}
		}
		slices.SortStableFunc(due, func(a, b string) int { return s.items[a].visible.Compare(s.items[b].visible) })
		ids = append(ids, due[:max(0, min(len(due), n-len(ids)))]...)
	}
	s.mu.Unlock()
	var gs []grant
	for _, id := range ids {
		g, err := s.claimOne(r, id, true)
		if err == nil {
			gs = append(gs, g)
		}
	}
	return gs, nil
}

// claimID implements Source.
func (s *MemorySource) claimID(_ context.Context, r claimReq, id string) (grant, error) {
	g, err := s.claimOne(r, id, false)
	if errors.Is(err, errTaken) {
		rec, _ := s.inspectClaim(context.Background(), id)
		return grant{}, &lease.NotAcquiredError{Key: r.KeyPrefix + escapeID(id), Holder: rec.Owner, Token: rec.Token, Remaining: rec.Remaining}
	}
	return g, err
}

// claimOne claims item id for r if it is pending or running with an
// expired claim or (unless ready is set) with none; with ready set, for
// claimReady, a pending item must also be past its retry time. The claim
// is a fenced write under a token one above the item's fence and above
// every token of a removed item (see MemorySource.Sweep), so that the
// fence and the item move together.
func (s *MemorySource) claimOne(r claimReq, id string, ready bool) (grant, error) {
	key := r.KeyPrefix + escapeID(id)
	if err := lease.ValidateKey(key); err != nil {
		return grant{}, fmt.Errorf("%w: leasequeue: item %q: %w", fence.ErrInvalid, id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[id]
	now := s.clock.Now()
	switch {
	case it == nil:
		return grant{}, notFound(id)
	case it.State == Done || it.State == Dead:
		return grant{}, finished(id, it.State)
	case it.State == Running && now.Before(it.visible) && (ready || it.nonce != ""),
		it.State == Pending && ready && now.Before(it.visible):
		return grant{}, errTaken
	}
	snap := lease.Snapshot{Key: key, Owner: r.Owner, Token: max(it.mark.Token, s.floor) + 1}
	next, err := it.mark.Admit(id, snap)
	if err != nil {
		return grant{}, err // fenced by another lease key
	}
	it.mark = next
	it.State, it.Owner, it.nonce = Running, r.Owner, r.Nonce
	it.Attempts++
	it.visible = now.Add(r.TTL)
	return grant{ID: id, Token: snap.Token, begun: begun{Attempt: it.Attempts, Age: max(now.Sub(it.ready), 0)}}, nil
}

// renewClaim implements Source.
func (s *MemorySource) renewClaim(_ context.Context, id string, a lease.Acquisition, ttl time.Duration) error {
	return s.onClaim(id, a, func(it *memoryItem, now time.Time) { it.visible = now.Add(ttl) })
}

// releaseClaim implements Source.
func (s *MemorySource) releaseClaim(_ context.Context, id string, a lease.Acquisition) error {
	return s.onClaim(id, a, func(it *memoryItem, now time.Time) { it.visible, it.nonce = now, "" })
}

// onClaim applies f to item id if a is its current, unexpired claim (any
// token of a.Nonce if a.Token is 0), and returns a's *lease.LostError
// otherwise.
func (s *MemorySource) onClaim(id string, a lease.Acquisition, f func(*memoryItem, time.Time)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, now := s.items[id], s.clock.Now()
	var token lease.Token
	if it != nil {
		token = it.mark.Token
	}
	if it != nil && it.State == Running && it.nonce == a.Nonce && (a.Token == 0 || a.Token == token) && now.Before(it.visible) {
		f(it, now)
		return nil
	}
	reason := lease.Expired
	if a.Token != 0 && token > a.Token {
		reason = lease.Superseded
	}
	return &lease.LostError{Key: a.Key, Token: a.Token, Reason: reason}
}

// inspectClaim implements Source. The Record's Key is left empty.
func (s *MemorySource) inspectClaim(_ context.Context, id string) (lease.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rec lease.Record
	it := s.items[id]
	if it != nil {
		rec.Token = it.mark.Token
	}
	if it != nil && it.State == Running && it.nonce != "" {
		if left := it.visible.Sub(s.clock.Now()); left > 0 {
			rec.Held, rec.Owner, rec.Remaining = true, it.Owner, left
		}
	}
	return rec, nil
}
