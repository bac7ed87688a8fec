// Package memory is a process-local lease.Backend for tests, examples and
// single-process programs. It is deterministic, safe for concurrent use,
// and runs expiry on an injectable clock.
//
// It is never distributed: leases live in one process's memory, so two
// processes (or two Stores) never see each other's leases. Use the Valkey or
// PostgreSQL backend to coordinate replicas.
package memory

import (
	"context"
	"sync"
	"time"

	"github.com/golib/lease/lease"
)

// Options configure a Store.
type Options struct {
	// Clock decides expiry. Default lease.SystemClock(). Tests pass a
	// leasetest.FakeClock, usually the same one the client uses.
	Clock lease.Clock
}

// Store is an in-memory lease.Backend. The zero value is not usable; call
// New.
type Store struct {
	clock lease.Clock

	mu       sync.Mutex
	recs     map[string]*record
	watchers map[string]map[chan struct{}]struct{}
}

type record struct {
	owner, nonce string
	token        lease.Token // last token issued; never decreases
	held         bool
	forced       bool // ForceRelease ended the last acquisition
	expires      time.Time
}

// New returns an empty Store.
func New(o Options) *Store {
	if o.Clock == nil {
		o.Clock = lease.SystemClock()
	}
	return &Store{clock: o.Clock, recs: make(map[string]*record), watchers: make(map[string]map[chan struct{}]struct{})}
}

var (
	_ lease.Backend        = (*Store)(nil)
	_ lease.ReleaseWatcher = (*Store)(nil)
	_ lease.Lister         = (*Store)(nil)
	_ lease.ForceReleaser  = (*Store)(nil)
)

// live returns the record of key if it is held and not expired at now.
func (s *Store) live(key string, now time.Time) *record {
	r := s.recs[key]
	if r == nil || !r.held || !now.Before(r.expires) {
		return nil
	}
	return r
}

// Acquire implements lease.Backend.
func (s *Store) Acquire(ctx context.Context, req lease.AcquireRequest) (lease.Token, error) {
	if err := ctx.Err(); err != nil {
		return 0, err // not applied
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	if r := s.live(req.Key, now); r != nil {
		if r.nonce == req.Nonce {
			r.expires = now.Add(req.TTL)
			return r.token, nil
		}
		return 0, &lease.NotAcquiredError{Key: req.Key, Holder: r.owner, Token: r.token, Remaining: r.expires.Sub(now)}
	}
	r := s.recs[req.Key]
	if r == nil {
		r = &record{}
		s.recs[req.Key] = r
	}
	r.token++
	r.owner, r.nonce, r.held, r.forced, r.expires = req.Owner, req.Nonce, true, false, now.Add(req.TTL)
	return r.token, nil
}

// check returns the live record of a, or the *lease.LostError saying why
// there is none.
func (s *Store) check(a lease.Acquisition, now time.Time) (*record, error) {
	r := s.recs[a.Key]
	if r == nil {
		return nil, &lease.LostError{Key: a.Key, Token: a.Token, Reason: lease.RecordLost}
	}
	mine := r.nonce == a.Nonce && (a.Token == 0 || r.token == a.Token)
	switch {
	case !mine:
		return nil, &lease.LostError{Key: a.Key, Token: a.Token, Reason: lease.Superseded}
	case r.forced:
		return nil, &lease.LostError{Key: a.Key, Token: a.Token, Reason: lease.ForceReleased}
	case !r.held || !now.Before(r.expires):
		return nil, &lease.LostError{Key: a.Key, Token: a.Token, Reason: lease.Expired}
	}
	return r, nil
}

// Renew implements lease.Backend.
func (s *Store) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	r, err := s.check(a, now)
	if err != nil {
		return err
	}
	r.expires = now.Add(ttl)
	return nil
}

// Release implements lease.Backend.
func (s *Store) Release(ctx context.Context, a lease.Acquisition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.check(a, s.clock.Now())
	if err != nil {
		return err
	}
	r.held = false
	s.notify(a.Key)
	return nil
}

// notify wakes the watchers of key. s.mu must be held.
func (s *Store) notify(key string) {
	for ch := range s.watchers[key] {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// WatchReleases implements lease.ReleaseWatcher: the channel receives a
// value after each Release of key, and at once if key is not held when
// the watch begins (it may have been released since the caller found it
// held).
func (s *Store) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watchers[key] == nil {
		s.watchers[key] = make(map[chan struct{}]struct{})
	}
	s.watchers[key][ch] = struct{}{}
	if s.live(key, s.clock.Now()) == nil {
		ch <- struct{}{}
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(s.watchers[key], ch)
			if len(s.watchers[key]) == 0 {
				delete(s.watchers, key)
			}
		})
	}
	return ch, stop, nil
}

// Inspect implements lease.Backend.
func (s *Store) Inspect(ctx context.Context, key string) (lease.Record, error) {
	if err := ctx.Err(); err != nil {
		return lease.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	rec := lease.Record{Key: key}
	if r := s.recs[key]; r != nil {
		rec.Token = r.token
		if s.live(key, now) != nil {
			rec.Held, rec.Owner, rec.Remaining = true, r.owner, r.expires.Sub(now)
		}
	}
	return rec, nil
}
