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

	// Retention is how long the record of a key is kept after its lease
	// ended (released, expired or force-released): Inspect and List show
	// its last token until then. Default lease.DefaultRetention;
	// lease.KeepForever keeps every record. The Store forgets records past
	// their retention by itself, a few at a time as it acquires (so its
	// memory stays proportional to the keys in use), and when swept (see
	// Sweep).
	//
	// Tokens never go back for that: the Store's tokens are not seeded
	// from a clock, so it keeps one counter, the highest token of every
	// record it forgot, and a key without a record starts above it.
	Retention time.Duration
}

// Store is an in-memory lease.Backend. The zero value is not usable; call
// New.
type Store struct {
	clock     lease.Clock
	retention time.Duration // lease.KeepForever: never forget

	mu       sync.Mutex
	recs     map[string]*record
	watchers map[string]map[chan struct{}]struct{}
	// floor is the highest token of every record forgotten: a key without
	// a record starts above it.
	floor lease.Token
	// grants counts acquisitions since the last pass of forget.
	grants int
}

type record struct {
	owner, nonce string
	token        lease.Token // last token issued; never decreases
	held         bool
	forced       bool // ForceRelease ended the last acquisition
	expires      time.Time
	ended        time.Time // when Release or ForceRelease ended it
	// acquired and renewed are when the last acquisition was granted and
	// last extended; transitions counts the grants after the first.
	acquired, renewed time.Time
	transitions       uint64
}

// fill sets rec's token and history from r, and the holder if r is held
// at now. s.mu must be held.
func (r *record) fill(rec *lease.Record, now time.Time) {
	rec.Token, rec.AcquiredAt, rec.RenewedAt, rec.Transitions = r.token, r.acquired.Round(0), r.renewed.Round(0), r.transitions
	if r.held && now.Before(r.expires) {
		rec.Held, rec.Owner, rec.Remaining = true, r.owner, r.expires.Sub(now)
	}
}

// end returns when r's last acquisition ended, and false if it has not
// ended at now.
func (r *record) end(now time.Time) (time.Time, bool) {
	if r.held {
		return r.expires, !now.Before(r.expires)
	}
	return r.ended, true
}

// New returns an empty Store. A negative Retention other than
// lease.KeepForever counts as the default.
func New(o Options) *Store {
	if o.Clock == nil {
		o.Clock = lease.SystemClock()
	}
	if o.Retention == 0 || (o.Retention < 0 && o.Retention != lease.KeepForever) {
		o.Retention = lease.DefaultRetention
	}
	return &Store{clock: o.Clock, retention: o.Retention, recs: make(map[string]*record), watchers: make(map[string]map[chan struct{}]struct{})}
}

var (
	_ lease.Backend        = (*Store)(nil)
	_ lease.ReleaseWatcher = (*Store)(nil)
	_ lease.Lister         = (*Store)(nil)
	_ lease.ForceReleaser  = (*Store)(nil)
	_ lease.Sweeper        = (*Store)(nil)
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
			s.extend(r, now, req.TTL)
			return r.token, nil
		}
		return 0, &lease.NotAcquiredError{Key: req.Key, Holder: r.owner, Token: r.token, Remaining: r.expires.Sub(now)}
	}
	tok := s.floor + 1
	if r := s.recs[req.Key]; r != nil {
		tok = r.token + 1
	}
	s.grant(req.Key, req, tok, now)
	return tok, nil
}

// grant grants key, which no live acquisition holds, to the acquisition
// req.Nonce for req.TTL with token tok, above the key's last token.
// s.mu must be held.
func (s *Store) grant(key string, req lease.AcquireRequest, tok lease.Token, now time.Time) {
	r := s.recs[key]
	if r == nil {
		s.forgetSome(now)
		r = &record{}
		s.recs[key] = r
	} else {
		r.transitions++
	}
	r.token = tok
	r.owner, r.nonce, r.held, r.forced, r.expires = req.Owner, req.Nonce, true, false, now.Add(req.TTL)
	r.acquired, r.renewed = now, now
}

// extend extends the live acquisition of r to ttl from now. s.mu must be
// held.
func (s *Store) extend(r *record, now time.Time, ttl time.Duration) {
	r.expires, r.renewed = now.Add(ttl), now
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
	s.extend(r, now, ttl)
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
	r.held, r.ended = false, s.clock.Now()
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
		r.fill(&rec, now)
	}
	return rec, nil
}
