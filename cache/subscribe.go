package cache

import (
	"context"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/valkeystore"
)

// subscribe subscribes to the shard channel ch and returns a channel that
// receives a value (at least once, possibly more) after each message, and
// a function that ends the subscription and waits for its goroutine to
// exit. It returns once the server has confirmed the subscription, so a
// message published after subscribe returns is seen. ctx bounds the setup.
func subscribe(ctx context.Context, client valkey.Client, ch string) (<-chan struct{}, func(), error) {
	msgs := make(chan struct{}, 1)
	sub := valkeystore.Subscribe(client, ch, valkeystore.Handlers{Message: func() {
		select {
		case msgs <- struct{}{}:
		default: // a value is already waiting
		}
	}})
	if err := sub.Wait(ctx); err != nil {
		return nil, nil, err
	}
	return msgs, sub.Stop, nil
}
