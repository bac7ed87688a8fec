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
	"slices"
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
	watchers map[string]map[chan struct{}]struct{} // WatchReleases
	changes  map[string]map[chan struct{}]struct{} // WatchChanges
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
	// handedOff: HandOff ended the last acquisition (whose owner and
	// nonce the record keeps) and offered the key to offer until
	// offerUntil, with token.
	handedOff  bool
	offer      []string
	offerUntil time.Time
	// pref is the preferred candidate waiting for the key, until
	// prefUntil.
	pref      string
	prefUntil time.Time
	expires   time.Time
	ended     time.Time // when Release or ForceRelease ended it
	// acquired and renewed are when the last acquisition was granted and
	// last extended; transitions counts the grants after the first.
	acquired, renewed time.Time
	transitions       uint64
}

// fill sets rec's token and history from r, and the holder if r is held
// at now. s.mu must be held.
func (r *record) fill(rec *lease.Record, now time.Time) {
	rec.Token, rec.AcquiredAt, rec.RenewedAt, rec.Transitions = r.token, r.acquired.Round(0), r.renewed.Round(0), r.transitions
	switch {
	case r.held && now.Before(r.expires):
		rec.Held, rec.Owner, rec.Remaining = true, r.owner, r.expires.Sub(now)
	case r.forced:
		rec.Ending = lease.EndForceReleased
	case r.handedOff:
		rec.Ending = lease.EndHandedOff
		if r.offering(now) {
			rec.Owner, rec.Remaining, rec.Candidates = r.owner, r.offerUntil.Sub(now), slices.Clone(r.offer)
		}
	case r.held:
		rec.Ending = lease.EndExpired
	default:
		rec.Ending = lease.EndReleased
	}
	if r.pref != "" && now.Before(r.prefUntil) {
		rec.Preferred = r.pref
	}
}

// offering reports whether a hand-off's offer stands at now.
func (r *record) offering(now time.Time) bool {
	return r.handedOff && now.Before(r.offerUntil)
}

// end returns when r's last acquisition ended, and false if it has not
// ended at now.
func (r *record) end(now time.Time) (time.Time, bool) {
	switch {
	case r.held:
		return r.expires, !now.Before(r.expires)
	case r.handedOff:
		return r.offerUntil, !now.Before(r.offerUntil)
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
	return &Store{clock: o.Clock, retention: o.Retention, recs: make(map[string]*record), watchers: make(map[string]map[chan struct{}]struct{}), changes: make(map[string]map[chan struct{}]struct{})}
}

var (
	_ lease.Backend        = (*Store)(nil)
	_ lease.ReleaseWatcher = (*Store)(nil)
	_ lease.Lister         = (*Store)(nil)
	_ lease.ForceReleaser  = (*Store)(nil)
	_ lease.Sweeper        = (*Store)(nil)
	_ lease.HandOffer      = (*Store)(nil)
	_ lease.ChangeWatcher  = (*Store)(nil)
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
		if req.Preferred {
			s.prefer(req, r, now)
		}
		return 0, &lease.NotAcquiredError{Key: req.Key, Holder: r.owner, Token: r.token, Remaining: r.expires.Sub(now)}
	}
	tok := s.floor + 1
	if r := s.recs[req.Key]; r != nil {
		tok = r.token + 1
		if r.offering(now) {
			if !slices.Contains(r.offer, req.Owner) {
				return 0, &lease.NotAcquiredError{Key: req.Key, Token: r.token, Remaining: r.offerUntil.Sub(now), Candidates: slices.Clone(r.offer)}
			}
			tok = r.token // the token the hand-off issued for the candidate
		}
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
	r.handedOff, r.offer = false, nil
	if r.pref == req.Owner {
		r.pref = ""
	}
	r.acquired, r.renewed = now, now
	s.notify(key, false)
}

// prefer records req.Owner as the preferred candidate for the key of r,
// which another acquisition holds, and announces it if it is new. s.mu
// must be held.
func (s *Store) prefer(req lease.AcquireRequest, r *record, now time.Time) {
	fresh := r.pref != req.Owner || !now.Before(r.prefUntil)
	r.pref, r.prefUntil = req.Owner, now.Add(req.TTL)
	if fresh {
		s.notify(req.Key, false)
	}
}

// HandOff implements lease.HandOffer: it ends a and offers its key to
// o.Candidates for o.Window, with the next token.
func (s *Store) HandOff(ctx context.Context, a lease.Acquisition, o lease.Offer) (lease.Token, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	r, err := s.check(a, now)
	if err != nil {
		return 0, err
	}
	r.token++
	r.held, r.ended = false, now
	r.handedOff, r.offer, r.offerUntil = true, slices.Clone(o.Candidates), now.Add(o.Window)
	s.notify(a.Key, true)
	return r.token, nil
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
	case r.handedOff && r.nonce == a.Nonce:
		return nil, &lease.LostError{Key: a.Key, Token: a.Token, Reason: lease.HandedOff}
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
	s.notify(a.Key, true)
	return nil
}

// notify wakes the change watchers of key and, if frees (the change freed
// the key: a release, hand-off or force release), its release watchers.
// s.mu must be held.
func (s *Store) notify(key string, frees bool) {
	wake := func(set map[chan struct{}]struct{}) {
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default: // a wake-up is already pending
			}
		}
	}
	wake(s.changes[key])
	if frees {
		wake(s.watchers[key])
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
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, stop := s.watch(s.watchers, key)
	if s.live(key, s.clock.Now()) == nil {
		ch <- struct{}{}
	}
	return ch, stop, nil
}

// WatchChanges implements lease.ChangeWatcher: the channel receives a
// value at once (the watch is in place) and after every change of key's
// holder or state (a grant to a new acquisition, a release, a hand-off, a
// force release, a new preferred candidate).
func (s *Store) WatchChanges(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, stop := s.watch(s.changes, key)
	ch <- struct{}{}
	return ch, stop, nil
}

// watch adds a watcher of key to set and returns its channel and the
// function that removes it. s.mu must be held.
func (s *Store) watch(set map[string]map[chan struct{}]struct{}, key string) (chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	if set[key] == nil {
		set[key] = make(map[chan struct{}]struct{})
	}
	set[key][ch] = struct{}{}
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(set[key], ch)
			if len(set[key]) == 0 {
				delete(set, key)
			}
		})
	}
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
