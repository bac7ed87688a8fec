package valkeystore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/golib/lease/internal/faults"
	"github.com/golib/lease/internal/testserver"
	"github.com/golib/lease/internal/valkeystore"
)

// TestSubscribe: Handlers.Ready has run when Wait returns; a message
// published then reaches Handlers.Message; Stop ends the subscription on
// the server too, and Handlers.End runs before Done closes.
func TestSubscribe(t *testing.T) {
	c := faults.ValkeyClient(t, testserver.Valkey(t).Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := fmt.Sprintf("valkeystore-test:{%d}", time.Now().UnixNano())
	got := make(chan struct{}, 1)
	ready, ended := make(chan struct{}), make(chan struct{})
	sub := valkeystore.Subscribe(c, ch, valkeystore.Handlers{
		Ready:   func() { close(ready) },
		Message: func() { got <- struct{}{} },
		End:     func() { close(ended) },
	})
	if err := sub.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	select {
	case <-ready:
	default:
		t.Fatal("Handlers.Ready had not run when Wait returned")
	}
	if err := c.Do(ctx, c.B().Spublish().Channel(ch).Message("m").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-ctx.Done():
		t.Fatal("the message published after Wait was not received")
	}
	sub.Stop()
	sub.Stop() // idempotent
	select {
	case <-ended:
	default:
		t.Fatal("Handlers.End had not run when Stop returned")
	}
	n, err := c.Do(ctx, c.B().PubsubShardnumsub().Channel(ch).Build()).AsIntMap()
	if err != nil || n[ch] != 0 {
		t.Fatalf("subscribers of %s after Stop: %v, %v; want 0 (SUNSUBSCRIBE sent)", ch, n, err)
	}
}

// TestSubscribeWaitEndsWithContext: a subscription the server never
// confirms (valkey-go keeps retrying a stopped server) ends when Wait's
// context does, with the context's cause, and Wait stops it.
func TestSubscribeWaitEndsWithContext(t *testing.T) {
	s := testserver.StartValkey(t, testserver.ValkeyOptions{})
	c := faults.ValkeyClient(t, s.Addr())
	s.Stop()
	cause := errors.New("gave up waiting")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, cause)
	defer cancel()
	sub := valkeystore.Subscribe(c, "valkeystore-test:down", valkeystore.Handlers{})
	if err := sub.Wait(ctx); !errors.Is(err, cause) {
		t.Fatalf("Wait on a stopped server = %v, want the context's cause", err)
	}
	select {
	case <-sub.Done():
	default:
		t.Fatal("Wait returned but the subscription still runs")
	}
}
