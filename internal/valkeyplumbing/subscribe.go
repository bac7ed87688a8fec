package valkeyplumbing

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	valkey "github.com/valkey-io/valkey-go"
)

// unsubscribeTimeout bounds the SUNSUBSCRIBE sent when a subscription ends.
const unsubscribeTimeout = time.Second

// Bounds of the wait before subscribing again after the server ended a
// confirmed subscription; it doubles from the first to the last.
const (
	resubscribeFirst = 10 * time.Millisecond
	resubscribeMax   = time.Second
)

// A Subscription is one SSUBSCRIBE to a shard channel, received in a
// goroutine of its own, and kept: if the server ends it once it was
// confirmed, it subscribes again until stopped. Its methods are safe for
// concurrent use.
type Subscription struct {
	ready  chan struct{} // closed once confirmed or failed
	err    error         // why it failed; set before ready closes
	settle sync.Once
	cancel context.CancelFunc
	done   chan struct{} // closed when the receiving goroutine has exited
	stop   sync.Once
}

// Handlers are the callbacks of a Subscription, each optional. They must
// be fast. Ready and Message are called from valkey-go's goroutines,
// Interrupted and End from the Subscription's.
type Handlers struct {
	// Ready is called each time the server confirms the subscription: the
	// first time, before [Subscription.Ready] closes, and again after each
	// re-subscription (valkey-go's, after a lost connection, or the
	// Subscription's own, after Interrupted). Messages published while the
	// subscription was interrupted were not seen, so a caller that waits
	// for one should look again when Ready is called.
	Ready func()
	// Message is called for every message, with its payload.
	Message func(payload string)
	// Interrupted is called when the server ended the confirmed
	// subscription while it was still wanted: it removed the channel's
	// hash slot from the node (a cluster failover or a slot migration), or
	// the connection ended in a way valkey-go does not retry. The
	// Subscription subscribes again, and calls Ready once confirmed.
	Interrupted func()
	// End is called once the subscription has ended for good (stopped, or
	// failed before it was confirmed), before [Subscription.Done] closes.
	End func()
}

// Subscribe subscribes to the shard channel ch on client, calling h's
// handlers as it goes.
//
// Subscribe returns at once. [Subscription.Ready] closes when the server has
// confirmed the subscription (a message published after that is seen) or
// it failed ([Subscription.Err]). Once confirmed, the subscription lasts
// until [Subscription.Stop]: valkey-go subscribes again after a lost
// connection, and Subscribe itself after the server ends the subscription
// (waiting 10ms, doubling up to a second, between attempts). Cancelling
// only stops listening, so each time a subscription ends Subscribe also
// sends SUNSUBSCRIBE on the connection that subscribed, bounded by a
// second.
func Subscribe(client valkey.Client, ch string, h Handlers) *Subscription {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Subscription{ready: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	var confirmed atomic.Int64 // how many times the server confirmed it
	ctx = valkey.WithOnSubscriptionHook(ctx, func(sub valkey.PubSubSubscription) {
		if sub.Kind == "ssubscribe" && sub.Channel == ch {
			confirmed.Add(1)
			if h.Ready != nil {
				h.Ready()
			}
			s.settle.Do(func() { close(s.ready) })
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
		wait, seen := resubscribeFirst, int64(0)
		for {
			err := client.Receive(ctx, client.B().Ssubscribe().Channel(ch).Build(), func(m valkey.PubSubMessage) {
				if h.Message != nil {
					h.Message(m.Message)
				}
			})
			n := confirmed.Load()
			if ctx.Err() != nil || n == 0 {
				if err == nil || errors.Is(err, context.Canceled) {
					err = errors.New("subscription ended before it was confirmed")
				}
				s.settleWith(err) // no-op if the subscription was confirmed
				break
			}
			if h.Interrupted != nil {
				h.Interrupted()
			}
			if n != seen { // confirmed since the last interruption
				wait, seen = resubscribeFirst, n
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			wait = min(2*wait, resubscribeMax)
		}
		if h.End != nil {
			h.End()
		}
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
