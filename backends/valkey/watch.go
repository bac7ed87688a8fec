package valkey

import (
	"context"
	"fmt"
	"time"

	"github.com/golib/lease/internal/valkeyplumbing"
)

// A watch is one SSUBSCRIBE to a key's shard channel, shared by every
// WatchReleases and WatchChanges call of the Store on that key.
type watch struct {
	ch string
	// subs are the subscribers' channels, each true for a change watcher
	// (woken by every message) and false for a release waiter (woken only
	// by a message that frees the key); guarded by Store.mu.
	subs    map[chan struct{}]bool
	sub     *valkeyplumbing.Subscription
	ready   bool // the server confirmed the subscription; guarded by Store.mu
	closing bool // no subscriber is left; guarded by Store.mu
}

// wakeLocked sends a value to c unless one is already waiting.
func wakeLocked(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default: // a value is already waiting
	}
}

// wakeAllLocked wakes every subscriber of w. Store.mu is held.
func (w *watch) wakeAllLocked() {
	for c := range w.subs {
		wakeLocked(c)
	}
}

// wakeLockedFor wakes the subscribers of w that payload concerns: every
// one for a message that frees the key, only the change watchers for
// another change. Store.mu is held.
func (w *watch) wakeLockedFor(payload string) {
	frees := freesKey(payload)
	for c, changes := range w.subs {
		if changes || frees {
			wakeLocked(c)
		}
	}
}

// freesKey reports whether a message on a key's shard channel announces
// that the key is free (a release, a forced release, a hand-off: the
// token in decimal, as every version published), rather than a change
// that leaves it taken (a grant, "acquired"; a preferred candidate,
// "preferred"; see lua/record.lua). A payload of neither kind frees it:
// waking a release waiter in vain costs one attempt, missing a release a
// wait.
func freesKey(payload string) bool {
	return payload != "acquired" && payload != "preferred"
}

// subscribeWait is how long WatchReleases waits for the server to confirm
// the subscription before it returns the channel anyway, so that a slow
// server never holds up the caller's retries.
const subscribeWait = 100 * time.Millisecond

// WatchReleases implements lease.ReleaseWatcher: the returned channel
// receives a value when Release, ForceRelease or HandOff frees key,
// announced by their scripts on the key's shard channel (not when it is
// granted, nor when a preferred candidate is recorded, announced on the
// same channel). It also receives one each time the subscription is in
// place, the first time and again after the server ended it (a cluster
// failover or slot migration moves the key's slot; the watch subscribes
// again) or the connection was lost (valkey-go subscribes again), since a
// release announced before then went unseen: the waiter asks again at
// once. Calls for the same key, and WatchChanges calls, share one
// subscription, which ends when the last of them is stopped. It waits at
// most 100ms, and no longer than ctx allows, for the server to confirm
// the subscription; stop ends it (sending SUNSUBSCRIBE, bounded by a
// second) and waits for its goroutine to exit.
func (s *Store) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return s.watchKey(ctx, "watch releases", key, false)
}

// WatchChanges implements lease.ChangeWatcher as WatchReleases does, on
// the same subscription: the returned channel receives a value after
// every change the scripts announce on the key's shard channel (a grant
// to a new acquisition, a release, a forced release, a hand-off, a newly
// recorded preferred candidate; not a renewal, nor an expiry), and each
// time the subscription is in place.
func (s *Store) WatchChanges(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return s.watchKey(ctx, "watch changes", key, true)
}

// watchKey adds a subscriber to the watch of key's shard channel, a
// change watcher if changes, a release waiter if not.
func (s *Store) watchKey(ctx context.Context, op, key string, changes bool) (<-chan struct{}, func(), error) {
	if err := validate(op, key); err != nil {
		return nil, nil, err
	}
	ch := releaseChannel(recordKey(s.prefix, key))
	for {
		s.mu.Lock()
		w := s.watches[ch]
		if w != nil && w.closing {
			// The last subscriber just left: let its SUNSUBSCRIBE go out
			// before subscribing again on what may be the same connection.
			s.mu.Unlock()
			select {
			case <-w.sub.Done():
				continue
			case <-ctx.Done():
				return nil, nil, beforeSend(ctx, op)
			}
		}
		if w == nil {
			w = s.startWatch(ch)
		}
		c := make(chan struct{}, 1)
		w.subs[c] = changes
		if w.ready {
			wakeLocked(c) // else the confirmation wakes it
		}
		s.mu.Unlock()

		stop := func() { s.unwatch(w, c) }
		t := time.NewTimer(subscribeWait)
		defer t.Stop()
		select {
		case <-w.sub.Ready():
			if err := w.sub.Err(); err != nil {
				stop()
				return nil, nil, fmt.Errorf("leasevalkey: %s: %w", op, err)
			}
		case <-t.C:
			// Not confirmed yet (a slow or paused server): watch anyway.
			// Notifications are a shortcut; the caller keeps polling.
		case <-ctx.Done():
			stop()
			return nil, nil, fmt.Errorf("leasevalkey: %s: %w", op, context.Cause(ctx))
		}
		return c, stop, nil
	}
}

// startWatch subscribes to ch in a new goroutine. s.mu is held.
func (s *Store) startWatch(ch string) *watch {
	w := &watch{ch: ch, subs: make(map[chan struct{}]bool)}
	if s.watches == nil {
		s.watches = make(map[string]*watch)
	}
	s.watches[ch] = w
	wake := func(payload string) {
		s.mu.Lock()
		w.wakeLockedFor(payload)
		s.mu.Unlock()
	}
	confirmed := func() {
		s.mu.Lock()
		w.ready = true
		w.wakeAllLocked()
		s.mu.Unlock()
	}
	interrupted := func() {
		s.mu.Lock()
		w.ready = false // the next confirmation wakes every subscriber
		s.mu.Unlock()
	}
	ended := func() {
		s.mu.Lock()
		if s.watches[ch] == w {
			delete(s.watches, ch)
		}
		s.mu.Unlock()
	}
	w.sub = valkeyplumbing.Subscribe(s.client, ch, valkeyplumbing.Handlers{Ready: confirmed, Message: wake, Interrupted: interrupted, End: ended})
	return w
}

// unwatch removes the subscriber c from w and, if it was the last, ends the
// subscription and waits for its goroutine to exit.
func (s *Store) unwatch(w *watch, c chan struct{}) {
	s.mu.Lock()
	_, ok := w.subs[c]
	delete(w.subs, c)
	last := ok && len(w.subs) == 0
	if last {
		w.closing = true
	}
	s.mu.Unlock()
	if last {
		w.sub.Stop()
	}
}
