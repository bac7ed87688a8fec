package valkeystore

import (
	"context"
	"errors"
	"sync"
	"time"

	valkey "github.com/valkey-io/valkey-go"
)

// unsubscribeTimeout bounds the SUNSUBSCRIBE sent when a subscription ends.
const unsubscribeTimeout = time.Second

// A Subscription is one SSUBSCRIBE to a shard channel, received in a
// goroutine of its own. Its methods are safe for concurrent use.
type Subscription struct {
	ready  chan struct{} // closed once confirmed or failed
	err    error         // why it failed; set before ready closes
	settle sync.Once
	cancel context.CancelFunc
	done   chan struct{} // closed when the receiving goroutine has exited
	stop   sync.Once
}

// Handlers are the callbacks of a Subscription, each called from its
// receiving goroutine and each optional. They must be fast.
type Handlers struct {
	// Ready is called once, when the server has confirmed the
	// subscription, before [Subscription.Ready] closes.
	Ready func()
	// Message is called for every message.
	Message func()
	// End is called once the subscription has ended, for any reason,
	// before [Subscription.Done] closes.
	End func()
}

// Subscribe subscribes to the shard channel ch on client, calling h's
// handlers as it goes.
//
// Subscribe returns at once. [Subscription.Ready] closes when the server has
// confirmed the subscription (a message published after that is seen) or
// it failed ([Subscription.Err]). Cancelling only stops listening, so when
// the subscription ends Subscribe also sends SUNSUBSCRIBE on the connection
// that subscribed, bounded by a second.
func Subscribe(client valkey.Client, ch string, h Handlers) *Subscription {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Subscription{ready: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	ctx = valkey.WithOnSubscriptionHook(ctx, func(sub valkey.PubSubSubscription) {
		if sub.Kind == "ssubscribe" && sub.Channel == ch {
			s.settle.Do(func() {
				if h.Ready != nil {
					h.Ready()
				}
				close(s.ready)
			})
		}
	})
	ctx = valkey.WithOnReceiveReturnHook(ctx, func(err error, c valkey.CommandClient) error {
		uctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
		defer cancel()
		_ = c.Do(uctx, c.B().Sunsubscribe().Channel(ch).Build()).Error()
		return err
	})
	go func() {
		defer close(s.done)
		err := client.Receive(ctx, client.B().Ssubscribe().Channel(ch).Build(), func(valkey.PubSubMessage) {
			if h.Message != nil {
				h.Message()
			}
		})
		if h.End != nil {
			h.End()
		}
		if err == nil || errors.Is(err, context.Canceled) {
			err = errors.New("subscription ended before it was confirmed")
		}
		s.settleWith(err) // no-op if the subscription was confirmed
	}()
	return s
}

func (s *Subscription) settleWith(err error) {
	s.settle.Do(func() { s.err = err; close(s.ready) })
}

// Ready returns a channel closed once the server confirmed the subscription
// or it failed; then Err says which. Successive calls return the same
// channel.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Err returns nil if the subscription was confirmed, or why it failed
// before it was. Call it after Ready is closed.
func (s *Subscription) Err() error {
	<-s.ready
	return s.err
}

// Done returns a channel closed when the subscription has ended and its
// goroutine has exited.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Stop ends the subscription and waits for its goroutine to exit. It is
// idempotent.
func (s *Subscription) Stop() {
	s.stop.Do(s.cancel)
	<-s.done
}

// Wait waits until the subscription is confirmed. If it fails, or ctx ends
// first, Wait stops it and returns why.
func (s *Subscription) Wait(ctx context.Context) error {
	select {
	case <-s.ready:
		if s.err != nil {
			s.Stop()
		}
		return s.err
	case <-ctx.Done():
		s.Stop()
		return context.Cause(ctx)
	}
}
