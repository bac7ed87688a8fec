package memory

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/golib/lease/lease"
)

var (
	_ lease.PermitAcquirer = (*Store)(nil)
	_ lease.SetAcquirer    = (*Store)(nil)
)

// AcquirePermit implements lease.PermitAcquirer, under the Store's one
// lock. A permit's record is the ordinary record of its permit key. The
// new token is one above the highest of the records of every permit key
// of the semaphore (any slot up to lease.MaxPermits) and of every record
// the Store forgot.
func (s *Store) AcquirePermit(ctx context.Context, r lease.AcquireRequest, permits int) (int, lease.Token, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err // not applied
	}
	if permits < 1 || permits > lease.MaxPermits {
		return 0, 0, fmt.Errorf("leasememory: acquire permit %q: %d permits, out of the range 1 to %d", r.Key, permits, lease.MaxPermits)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	var (
		buf   = make([]byte, 0, len(r.Key)+len("/permit/")+3)
		top   = s.floor
		free  = -1
		first *record // the holder whose permit ends first
	)
	buf = append(append(buf, r.Key...), "/permit/"...)
	base := len(buf)
	for i := range lease.MaxPermits {
		buf = strconv.AppendInt(buf[:base], int64(i), 10)
		rec := s.recs[string(buf)] // no allocation: the map lookup converts in place
		if rec == nil {
			if i < permits && free < 0 {
				free = i
			}
			continue
		}
		top = max(top, rec.token)
		if i >= permits {
			continue
		}
		switch live := rec.held && now.Before(rec.expires); {
		case live && rec.nonce == r.Nonce:
			s.extend(rec, now, r.TTL)
			return i, rec.token, nil
		case live:
			if first == nil || rec.expires.Before(first.expires) {
				first = rec
			}
		case free < 0:
			free = i
		}
	}
	if free < 0 {
		return 0, 0, &lease.NotAcquiredError{Key: r.Key, Holder: first.owner, Token: first.token, Remaining: first.expires.Sub(now)}
	}
	s.grant(lease.PermitKey(r.Key, free), r, top+1, now)
	return free, top + 1, nil
}

// AcquireSet implements lease.SetAcquirer, under the Store's one lock.
// Each key's record is an ordinary record.
func (s *Store) AcquireSet(ctx context.Context, keys []string, r lease.AcquireRequest) (lease.Token, error) {
	if err := ctx.Err(); err != nil {
		return 0, err // not applied
	}
	if err := checkSet(keys); err != nil {
		return 0, fmt.Errorf("leasememory: acquire set: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	top, mine := s.floor, 0
	var tok lease.Token // the token of the keys r.Nonce holds, if one
	for _, k := range keys {
		rec := s.recs[k]
		if rec == nil {
			continue
		}
		top = max(top, rec.token)
		if live := s.live(k, now); live != nil {
			if live.nonce != r.Nonce {
				return 0, &lease.NotAcquiredError{Key: k, Holder: live.owner, Token: live.token, Remaining: live.expires.Sub(now)}
			}
			if mine == 0 || live.token == tok {
				mine++
				tok = live.token
			}
		}
	}
	if mine == len(keys) {
		// A retry of the acquisition that holds the set: extend it.
		for _, k := range keys {
			s.extend(s.recs[k], now, r.TTL)
		}
		return tok, nil
	}
	// Keys this nonce holds alone (the rest of its set ended) are granted
	// afresh with the others.
	for _, k := range keys {
		s.grant(k, r, top+1, now)
	}
	return top + 1, nil
}

// RenewSet implements lease.SetAcquirer.
func (s *Store) RenewSet(ctx context.Context, keys []string, a lease.Acquisition, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkSet(keys); err != nil {
		return fmt.Errorf("leasememory: renew set: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	recs := make([]*record, len(keys))
	for i, k := range keys {
		a.Key = k
		r, err := s.check(a, now)
		if err != nil {
			return err
		}
		recs[i] = r
	}
	for _, r := range recs {
		s.extend(r, now, ttl)
	}
	return nil
}

// ReleaseSet implements lease.SetAcquirer.
func (s *Store) ReleaseSet(ctx context.Context, keys []string, a lease.Acquisition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkSet(keys); err != nil {
		return fmt.Errorf("leasememory: release set: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	var first error
	for _, k := range keys {
		a.Key = k
		r, err := s.check(a, now)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		r.held, r.ended = false, now
		s.notify(k, true)
	}
	return first
}

// checkSet reports whether keys is a set as lease.SetAcquirer takes it:
// 1 to lease.MaxSetKeys keys, sorted, without duplicates.
func checkSet(keys []string) error {
	if len(keys) == 0 || len(keys) > lease.MaxSetKeys {
		return fmt.Errorf("%d keys, out of the range 1 to %d", len(keys), lease.MaxSetKeys)
	}
	for i := 1; i < len(keys); i++ {
		if keys[i-1] >= keys[i] {
			return fmt.Errorf("keys %q and %q are not sorted, or the same", keys[i-1], keys[i])
		}
	}
	return nil
}
