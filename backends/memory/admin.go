package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golib/lease/lease"
)

// List implements lease.Lister. Pages are in key order (by bytes) and hold
// at most limit records; the cursor is the last key of the page.
func (s *Store) List(ctx context.Context, prefix, cursor string, limit int) ([]lease.Record, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if limit < 1 {
		return nil, "", fmt.Errorf("leasememory: list: limit %d is not positive", limit)
	}
	if cursor != "" && !strings.HasPrefix(cursor, prefix) {
		return nil, "", fmt.Errorf("leasememory: list: cursor %q does not belong to a listing of prefix %q", cursor, prefix)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.recs {
		if strings.HasPrefix(k, prefix) && k > cursor {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	next := ""
	if len(keys) > limit {
		keys = keys[:limit]
		next = keys[limit-1]
	}
	now := s.clock.Now()
	recs := make([]lease.Record, 0, len(keys))
	for _, k := range keys {
		rec := lease.Record{Key: k}
		s.recs[k].fill(&rec, now)
		recs = append(recs, rec)
	}
	return recs, next, nil
}

// ForceRelease implements lease.ForceReleaser.
func (s *Store) ForceRelease(ctx context.Context, key string, token lease.Token) (lease.Record, error) {
	if err := ctx.Err(); err != nil {
		return lease.Record{}, err
	}
	if err := lease.ValidateKey(key); err != nil {
		return lease.Record{}, fmt.Errorf("leasememory: force release: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	prev := lease.Record{Key: key}
	r := s.recs[key]
	if r != nil {
		r.fill(&prev, now)
	}
	live := s.live(key, now)
	if live == nil && r != nil && r.offering(now) && (token == 0 || token == r.token) {
		// End the standing offer of a hand-off: the key is free.
		r.handedOff, r.offer, r.forced = false, nil, true
		s.notify(key, true)
		return prev, nil
	}
	switch {
	case token != 0 && r != nil && r.token != token:
		return prev, &lease.LostError{Key: key, Token: token, Reason: lease.Superseded}
	case token != 0 && r != nil && r.forced:
		return prev, &lease.LostError{Key: key, Token: token, Reason: lease.ForceReleased}
	case token != 0 && r == nil:
		return prev, &lease.LostError{Key: key, Token: token, Reason: lease.RecordLost}
	case token != 0 && live == nil:
		return prev, &lease.LostError{Key: key, Token: token, Reason: lease.Expired}
	case live == nil:
		return prev, nil
	}
	live.held, live.forced, live.ended = false, true, now
	s.notify(key, true)
	return prev, nil
}

// expired reports whether r ended at least the retention before now. s.mu
// must be held.
func (s *Store) expired(r *record, now time.Time) bool {
	if s.retention == lease.KeepForever {
		return false
	}
	end, ok := r.end(now)
	return ok && !now.Before(end.Add(s.retention))
}

// forget removes the record of key, keeping its token in s.floor. s.mu
// must be held.
func (s *Store) forget(key string) {
	s.floor = max(s.floor, s.recs[key].token)
	delete(s.recs, key)
}

// forgetSome forgets the records past their retention, in one pass over
// them all once per a quarter as many new records as there are records, so
// that each new record costs at most four visits. s.mu must be held.
func (s *Store) forgetSome(now time.Time) {
	s.grants++
	if s.retention == lease.KeepForever || s.grants < max(len(s.recs)/4, 64) {
		return
	}
	s.grants = 0
	for k, r := range s.recs {
		if s.expired(r, now) {
			s.forget(k)
		}
	}
}

// Sweep implements lease.Sweeper: it forgets the records past their
// retention among the next limit keys after the cursor, in key order.
func (s *Store) Sweep(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
	if err := ctx.Err(); err != nil {
		return lease.SweepPage{}, err
	}
	if o.Limit < 1 {
		return lease.SweepPage{}, fmt.Errorf("leasememory: sweep: limit %d is not positive", o.Limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.recs {
		if k > o.Cursor {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var page lease.SweepPage
	if len(keys) > o.Limit {
		keys = keys[:o.Limit]
		page.Next = keys[o.Limit-1]
	}
	now := s.clock.Now()
	for _, k := range keys {
		if !s.expired(s.recs[k], now) {
			continue
		}
		page.Removed = append(page.Removed, k)
		if !o.DryRun {
			s.forget(k)
		}
	}
	return page, nil
}
