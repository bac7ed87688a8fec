package cache

import (
	"context"
	"sync/atomic"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/valkeyplumbing"
)

// subscribe subscribes to the shard channel ch and returns a channel that
// receives a value (at least once, possibly more) after each message, and
// after each re-subscription (a message published while the subscription
// was interrupted went unseen), and a function that ends the subscription
// and waits for its goroutine to exit. It returns once the server has
// confirmed the subscription, so a message published after subscribe
// returns is seen. ctx bounds the setup.
func subscribe(ctx context.Context, client valkey.Client, ch string) (<-chan struct{}, func(), error) {
	msgs := make(chan struct{}, 1)
	wake := func() {
		select {
		case msgs <- struct{}{}:
		default: // a value is already waiting
		}
	}
	var confirmations atomic.Int64
	sub := valkeyplumbing.Subscribe(client, ch, valkeyplumbing.Handlers{
		Message: func(string) { wake() },
		Ready: func() {
			if confirmations.Add(1) > 1 {
				wake()
			}
		},
	})
	if err := sub.Wait(ctx); err != nil {
		return nil, nil, err
	}
	return msgs, sub.Stop, nil
}
