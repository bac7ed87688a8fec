package valkey

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	valkey "github.com/valkey-io/valkey-go"
)

// A watch is one SSUBSCRIBE to a key's release channel, shared by every
// WatchReleases call of the Store on that key.
type watch struct {
	ch      string
	subs    map[chan struct{}]struct{} // guarded by Store.mu
	ready   chan struct{}              // closed once subscribed, or on failure
	err     error                      // why the subscription failed; set before ready closes
	cancel  context.CancelFunc         // ends the subscription
	done    chan struct{}              // closed when the receiving goroutine has exited
	closing bool                       // no subscriber is left; guarded by Store.mu
}

// unsubscribeTimeout bounds the SUNSUBSCRIBE sent when a watch ends.
const unsubscribeTimeout = time.Second

// subscribeWait is how long WatchReleases waits for the server to confirm
// the subscription before it returns the channel anyway, so that a slow
// server never holds up the caller's retries.
const subscribeWait = 100 * time.Millisecond

// WatchReleases implements lease.ReleaseWatcher: the returned channel
// receives a value when Release frees key, announced by the release script
// on the key's shard channel. Calls for the same key share one
// subscription, which ends when the last of them is stopped. It waits at
// most 100ms, and no longer than ctx allows, for the server to confirm the
// subscription; stop ends it (sending SUNSUBSCRIBE, bounded by a second)
// and waits for its goroutine to exit.
func (s *Store) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	const op = "watch releases"
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
			case <-w.done:
				continue
			case <-ctx.Done():
				return nil, nil, beforeSend(ctx, op)
			}
		}
		if w == nil {
			w = s.startWatch(ch)
		}
		c := make(chan struct{}, 1)
		w.subs[c] = struct{}{}
		s.mu.Unlock()

		stop := func() { s.unwatch(w, c) }
		t := time.NewTimer(subscribeWait)
		defer t.Stop()
		select {
		case <-w.ready:
			if w.err != nil {
				stop()
				return nil, nil, fmt.Errorf("leasevalkey: %s: %w", op, w.err)
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
	ctx, cancel := context.WithCancel(context.Background())
	w := &watch{ch: ch, subs: make(map[chan struct{}]struct{}), ready: make(chan struct{}),
		cancel: cancel, done: make(chan struct{})}
	if s.watches == nil {
		s.watches = make(map[string]*watch)
	}
	s.watches[ch] = w
	var once sync.Once
	settle := func(err error) { once.Do(func() { w.err = err; close(w.ready) }) }
	ctx = valkey.WithOnSubscriptionHook(ctx, func(sub valkey.PubSubSubscription) {
		if sub.Kind == "ssubscribe" {
			settle(nil)
		}
	})
	ctx = valkey.WithOnReceiveReturnHook(ctx, func(err error, c valkey.CommandClient) error {
		// Cancelling Receive only stops listening; tell the server too, on
		// the connection that subscribed.
		uctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
		defer cancel()
		_ = c.Do(uctx, c.B().Sunsubscribe().Channel(ch).Build()).Error()
		return err
	})
	go func() {
		defer close(w.done)
		err := s.client.Receive(ctx, s.client.B().Ssubscribe().Channel(ch).Build(), func(valkey.PubSubMessage) {
			s.mu.Lock()
			for c := range w.subs {
				select {
				case c <- struct{}{}:
				default: // a value is already waiting
				}
			}
			s.mu.Unlock()
		})
		s.mu.Lock()
		if s.watches[ch] == w {
			delete(s.watches, ch)
		}
		s.mu.Unlock()
		if err == nil || errors.Is(err, context.Canceled) {
			err = errors.New("subscription ended before it was confirmed")
		}
		settle(err) // no-op if the subscription was confirmed

	}()
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
		w.cancel()
		<-w.done
	}
}
