package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Tuning of the release listener.
const (
	// listenIdle is how long the listener keeps its connection after the
	// last watch stopped, before it gives it back to the pool.
	listenIdle = 30 * time.Second
	// rearmEvery is how often the listener marks the watched keys again
	// (queries/watch.sql marks a key for five minutes).
	rearmEvery = time.Minute
	// armTimeout bounds the marking of one key.
	armTimeout = 2 * time.Second
	// armAttempts is how many times the marking of a key runs
	// queries/watch.sql at most while it marks nothing.
	armAttempts = 3
	// armBatches is how many batches of keys the marking goroutine marks
	// at most before it wakes the watches of those it did not find held.
	armBatches = 4
	// listenBackoffMin and listenBackoffMax bound the pause before the
	// listener tries again after losing its connection.
	listenBackoffMin = 50 * time.Millisecond
	listenBackoffMax = 2 * time.Second
	// cleanupTimeout bounds the UNLISTEN run before the connection goes
	// back to the pool.
	cleanupTimeout = time.Second
)

// errNoListener is returned by WatchReleases when the Store cannot listen.
var errNoListener = errors.New("leasepostgres: release notifications are disabled or there is no pool to listen on; waiters poll")

// watchers is the set of active watches of one Store, by key, and the
// state of the goroutines that serve them. It is guarded by Store.mu.
type watchers struct {
	byKey   map[string]map[*watch]struct{}
	n       int
	running bool               // a listener goroutine serves them
	cancel  context.CancelFunc // stops that goroutine
	wg      sync.WaitGroup     // every listener goroutine, also those exiting
	arms    sync.WaitGroup     // every marking goroutine

	// listening: the listener's LISTEN is in effect. While it is not, new
	// watches are not marked: the listener marks every watched key once
	// it listens (again).
	listening bool

	// Keys waiting to be marked, and whether a marking goroutine runs:
	// one goroutine marks them in turn, so that the keys of one waiter,
	// watched one after another, are marked in one pass (see armLocked).
	pending []pendingMark
	arming  bool
}

// watch is one watch of a key: a release watch (WatchReleases) or, with
// changes set, a change watch (WatchChanges).
type watch struct {
	c       chan struct{}
	changes bool
}

// changePrefix begins the payload of a notification that announces a
// change that does not free the key (a grant to a new acquisition, a new
// preferred candidate: acquire.sql, acquirepreferred.sql), followed by
// the key. It wakes change watches only. The payload of a notification
// that frees the key (a release, a hand-off, a forced release) is the key
// alone, and wakes every watch of the key. Keys hold no control
// character (lease.ValidateKey), so the two cannot be confused.
const changePrefix = "\x01"

// parsePayload returns the key a notification names, and whether it
// frees the key.
func parsePayload(payload string) (key string, frees bool) {
	if key, ok := strings.CutPrefix(payload, changePrefix); ok {
		return key, false
	}
	return payload, true
}

// wake sends a value on w.c unless one is already pending.
func (w *watch) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// WatchReleases implements lease.ReleaseWatcher with LISTEN/NOTIFY: the
// channel receives a value when a release of key commits (Release, or
// ReleaseSet of a set with key; a permit of a semaphore is watched by its
// permit key, lease.PermitKey).
//
// A release notifies only if someone marked the key as waited for, since
// NOTIFY makes every committing transaction that sends one queue on a
// global lock. So WatchReleases marks the key, in the background and with
// one short statement (queries/watch.sql), for five minutes, renewed every
// minute while the watch lasts; the mark is set once the listener listens,
// and set again whenever it listens anew after losing its connection.
// The channel also receives a value when a mark does not find the key
// held, since its release may have gone unseen before: the waiter then
// simply tries again. A key the mark finds held is released after the
// mark, which notifies, so its watch stays quiet until then, and a waiter
// that watches many keys at once (the permits of a semaphore, the keys of
// a set) is not woken for the held ones.
//
// All watches of a Store share one listener, which holds one connection
// from the pool while any watch is active (and for a short while after),
// and gives it back at Close.
//
// It returns an error, and Client.Acquire then polls, if notifications are
// disabled, if there is no pool to listen on (see Options.ListenPool), or
// after Close. It does not block: the listener connects and the mark is
// set in the background.
func (s *Store) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return s.watch("WatchReleases", key, false)
}

// WatchChanges implements lease.ChangeWatcher on the listener of
// WatchReleases, which see: the same mark of the key, the same one
// connection for every watch of the Store. The channel receives a value
// when a release, a hand-off or a forced release of key commits, as for
// WatchReleases, and also when a grant to a new acquisition (not a
// renewal, nor an Acquire retried by the holder) or a new preferred
// candidate commits, which notify with a payload that release watches
// ignore. It also receives a value each time the watch is in place: once
// the key is marked when the watch begins, and again whenever the
// listener listens anew (after it lost its connection), since a change
// may have gone unseen meanwhile. Expiry is not announced.
//
// The mark is set on the key's row; for a key without a row it inserts
// one that holds nothing (see queries/watch.sql), so that the first grant
// of a key never acquired is announced too.
//
// It returns an error, and Client.Observe then only polls, when
// WatchReleases would.
func (s *Store) WatchChanges(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return s.watch("WatchChanges", key, true)
}

// watch adds a watch of key, a change watch if changes is set, for the
// method op.
func (s *Store) watch(op, key string, changes bool) (<-chan struct{}, func(), error) {
	if s.channel == "" || s.lisPool == nil {
		return nil, nil, errNoListener
	}
	w := &watch{c: make(chan struct{}, 1), changes: changes}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, fmt.Errorf("leasepostgres: %s: the Store is closed", op)
	}
	if s.w.byKey == nil {
		s.w.byKey = make(map[string]map[*watch]struct{})
	}
	set := s.w.byKey[key]
	if set == nil {
		set = make(map[*watch]struct{})
		s.w.byKey[key] = set
	}
	set[w] = struct{}{}
	s.w.n++
	if !s.w.running {
		lctx, cancel := context.WithCancel(s.ctx)
		s.w.running, s.w.cancel = true, cancel
		s.w.wg.Add(1)
		go s.listen(lctx)
	}
	if s.w.listening {
		s.armLocked([]string{key}, true)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if set := s.w.byKey[key]; set != nil {
				delete(set, w)
				if len(set) == 0 {
					delete(s.w.byKey, key)
				}
			}
			s.w.n--
		})
	}
	return w.c, stop, nil
}

// dedupe returns the marks of batch with each key once, in the order of
// their first mark, waking if any of its marks does.
func dedupe(batch []pendingMark) []pendingMark {
	at := make(map[string]int, len(batch))
	out := batch[:0:0]
	for _, m := range batch {
		if i, ok := at[m.key]; ok {
			out[i].wake = out[i].wake || m.wake
			continue
		}
		at[m.key] = len(out)
		out = append(out, m)
	}
	return out
}

// pendingMark is a key to mark, and whether to wake its watches if the
// mark does not find it held.
type pendingMark struct {
	key  string
	wake bool
}

// armLocked marks keys as waited for, in the background, and then, if
// wake is set, wakes the watches of each key that the mark did not find
// held: its release may have committed before the mark, unannounced. A
// key the mark found held (see queries/watch.sql) needs no wake-up for
// its release watches: its release comes after the mark and notifies.
// Its change watches are woken all the same: the watch is in place, and
// a change (a grant) may have come before, unannounced.
//
// One goroutine marks the keys of every call in turn, and wakes the
// watches only once it has no key left to mark: a waiter for a semaphore
// or a set watches every permit or key, one call after another, and is
// then woken once for them all instead of once per key. The caller holds
// s.mu and has checked that the Store is not closed.
func (s *Store) armLocked(keys []string, wake bool) {
	if len(keys) == 0 {
		return
	}
	for _, key := range keys {
		s.w.pending = append(s.w.pending, pendingMark{key, wake})
	}
	if s.w.arming {
		return
	}
	s.w.arming = true
	s.w.arms.Add(1)
	go s.armPending()
}

// armPending marks the pending keys until none is left, and then wakes
// the watches of those it did not find held. Under a steady stream of new
// watches it wakes them also after every armBatches batches, so that no
// wake-up waits for long.
func (s *Store) armPending() {
	defer s.w.arms.Done()
	type wakeUp struct {
		key   string
		frees bool // not found held: wake every watch, else change watches only
	}
	var wake []wakeUp
	for batches := 1; ; batches++ {
		s.mu.Lock()
		batch := s.w.pending
		s.w.pending = nil
		if len(batch) == 0 {
			s.w.arming = false
		}
		s.mu.Unlock()
		if len(batch) == 0 || batches%armBatches == 0 {
			for _, u := range wake {
				s.wakeKey(u.key, u.frees)
			}
			wake = wake[:0]
		}
		if len(batch) == 0 {
			return
		}
		for _, m := range dedupe(batch) {
			if held, err := s.arm(m.key); err == nil && m.wake {
				wake = append(wake, wakeUp{m.key, !held})
			}
		}
	}
}

// arm runs queries/watch.sql for key, on a connection of the listener's
// pool, bounded by armTimeout and by Close. It reports whether the key is
// held by an acquisition whose release will notify. It runs the statement
// again, up to armAttempts times in all, while it marked nothing: its
// snapshot predates the insert of the key's row by another statement
// (whose grant went unannounced, and whose release would too).
func (s *Store) arm(key string) (held bool, err error) {
	ctx, cancel := context.WithTimeout(s.ctx, armTimeout)
	defer cancel()
	c, err := s.lisPool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer c.Release()
	marked := false
	for range armAttempts {
		if err = c.QueryRow(ctx, s.q.watch, key).Scan(&held, &marked); err != nil || marked {
			break
		}
	}
	return held, err
}

// rearm marks every watched key again. It wakes no watch: each key was
// marked when its first watch began (and woken then), and a mark lasts
// five minutes, renewed every rearmEvery, so no release of a watched key
// went unannounced; waking them would cost every waiter a backend call
// per rearmEvery for nothing. Should a mark lapse all the same (the
// database unreachable for minutes), a missed release only delays the
// hand-over until the waiter asks again, as any missed notification does.
func (s *Store) rearm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.w.byKey) == 0 {
		return
	}
	keys := make([]string, 0, len(s.w.byKey))
	for key := range s.w.byKey {
		keys = append(keys, key)
	}
	s.armLocked(keys, false)
}

// wakeKey wakes the watches of key: every one if frees is set (the key
// was freed, or may have been), else the change watches only.
func (s *Store) wakeKey(key string, frees bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.w.byKey[key] {
		if frees || w.changes {
			w.wake()
		}
	}
}

// startListening records that LISTEN is in effect and marks every watched
// key, waking the watches of those the marks do not find held, and every
// change watch.
func (s *Store) startListening() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.listening = true
	if s.closed {
		return
	}
	keys := make([]string, 0, len(s.w.byKey))
	for key := range s.w.byKey {
		keys = append(keys, key)
	}
	s.armLocked(keys, true)
}

// stopListening records that LISTEN is no longer in effect: the
// listener's connection is gone.
func (s *Store) stopListening() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.listening = false
}

// idleExit reports whether the listener may exit because no watch is
// active; if so it marks the listener as stopped, under the lock, so that
// the next WatchReleases starts a new one.
func (s *Store) idleExit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w.n > 0 {
		return false
	}
	s.w.running = false
	s.w.cancel()
	return true
}

// stopListener stops the listener goroutine, if any, and waits for every
// listener and marking goroutine to exit. The caller has set s.closed, so
// no new one starts.
func (s *Store) stopListener() {
	s.mu.Lock()
	if s.w.running {
		s.w.cancel()
		s.w.running = false
	}
	s.mu.Unlock()
	s.w.wg.Wait()
	s.w.arms.Wait()
}

// listen runs the listener until ctx ends or it has been idle for s.idle:
// it takes a connection from the pool, LISTENs on the Store's channel and
// wakes the watches of each key named by a notification. It reconnects,
// with backoff, when the connection fails.
func (s *Store) listen(ctx context.Context) {
	defer s.w.wg.Done()
	backoff := listenBackoffMin
	for ctx.Err() == nil {
		started := time.Now()
		err := s.listenOnce(ctx)
		if err == nil {
			return // idle
		}
		if time.Since(started) > listenBackoffMax {
			backoff = listenBackoffMin // it listened for a while: a new failure
		}
		if ctx.Err() != nil || s.idleExit() {
			return // closed, or nobody waits any more
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

// listenOnce listens on one connection. It returns nil when the listener
// went idle, and an error when ctx ended or the connection failed.
func (s *Store) listenOnce(ctx context.Context) error {
	c, err := s.lisPool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer release(c)
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		return err
	}
	// Releases may have committed before LISTEN took effect: mark every
	// watched key (again), which wakes the watches of those not found
	// held. A key found held is released later, and notifies.
	s.startListening()
	defer s.stopListening()
	armed := time.Now()
	for {
		wctx, cancel := context.WithTimeout(ctx, min(s.idle, rearmEvery))
		n, err := c.Conn().WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			s.wakeKey(parsePayload(n.Payload))
		case ctx.Err() != nil:
			return ctx.Err()
		case wctx.Err() != nil && !c.Conn().IsClosed():
			if s.idleExit() {
				return nil
			}
		default:
			return err
		}
		if time.Since(armed) >= rearmEvery {
			s.rearm()
			armed = time.Now()
		}
	}
}

// release gives the listener's connection back to the pool without its
// LISTEN, or closes it if that fails.
func release(c *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if !c.Conn().IsClosed() {
		if _, err := c.Exec(ctx, "UNLISTEN *"); err != nil {
			_ = c.Conn().Close(ctx)
		}
	}
	c.Release()
}
