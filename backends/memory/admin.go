package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"

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
		rec := lease.Record{Key: k, Token: s.recs[k].token}
		if r := s.live(k, now); r != nil {
			rec.Held, rec.Owner, rec.Remaining = true, r.owner, r.expires.Sub(now)
		}
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
		prev.Token = r.token
	}
	live := s.live(key, now)
	if live != nil {
		prev.Held, prev.Owner, prev.Remaining = true, live.owner, live.expires.Sub(now)
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
	live.held, live.forced = false, true
	s.notify(key)
	return prev, nil
}
