package cache

import (
	"context"
	"errors"
	"sync"
	"time"

	valkey "github.com/valkey-io/valkey-go"
)

// unsubscribeTimeout bounds the SUNSUBSCRIBE sent when a subscription ends.
const unsubscribeTimeout = time.Second

// subscribe subscribes to the shard channel ch and returns a channel that
// receives a value (at least once, possibly more) after each message, and
// a function that ends the subscription and waits for its goroutine to
// exit. It returns once the server has confirmed the subscription, so a
// message published after subscribe returns is seen. ctx bounds the setup.
func subscribe(ctx context.Context, client valkey.Client, ch string) (<-chan struct{}, func(), error) {
	rctx, cancel := context.WithCancel(context.Background())
	ready := make(chan error, 1)
	settle := func(err error) {
		select {
		case ready <- err:
		default: // settled already
		}
	}
	rctx = valkey.WithOnSubscriptionHook(rctx, func(s valkey.PubSubSubscription) {
		if s.Kind == "ssubscribe" && s.Channel == ch {
			settle(nil)
		}
	})
	rctx = valkey.WithOnReceiveReturnHook(rctx, func(err error, cc valkey.CommandClient) error {
		// Cancelling Receive only stops listening; tell the server too, on
		// the connection that subscribed.
		uctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
		defer cancel()
		_ = cc.Do(uctx, cc.B().Sunsubscribe().Channel(ch).Build()).Error()
		return err
	})
	msgs := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := client.Receive(rctx, client.B().Ssubscribe().Channel(ch).Build(), func(valkey.PubSubMessage) {
			select {
			case msgs <- struct{}{}:
			default: // a value is already waiting
			}
		})
		if err == nil || errors.Is(err, context.Canceled) {
			err = errors.New("subscription ended before it was confirmed")
		}
		settle(err) // no-op if the subscription was confirmed
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	select {
	case err := <-ready:
		if err != nil {
			stop()
			return nil, nil, err
		}
		return msgs, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nil, context.Cause(ctx)
	}
}
