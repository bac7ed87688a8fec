package valkeyplumbing_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/testkit/faults"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/valkeyplumbing"
)

// TestSubscribe: Handlers.Ready has run when Wait returns; a message
// published then reaches Handlers.Message, with its payload; Stop ends the subscription on
// the server too, and Handlers.End runs before Done closes.
func TestSubscribe(t *testing.T) {
	c := faults.ValkeyClient(t, testserver.Valkey(t).Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := fmt.Sprintf("valkeyplumbing-test:{%d}", time.Now().UnixNano())
	got := make(chan string, 1)
	ready, ended := make(chan struct{}), make(chan struct{})
	sub := valkeyplumbing.Subscribe(c, ch, valkeyplumbing.Handlers{
		Ready:   func() { close(ready) },
		Message: func(m string) { got <- m },
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
	case m := <-got:
		if m != "m" {
			t.Errorf("Handlers.Message got payload %q, want %q", m, "m")
		}
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
	sub := valkeyplumbing.Subscribe(c, "valkeyplumbing-test:down", valkeyplumbing.Handlers{})
	if err := sub.Wait(ctx); !errors.Is(err, cause) {
		t.Fatalf("Wait on a stopped server = %v, want the context's cause", err)
	}
	select {
	case <-sub.Done():
	default:
		t.Fatal("Wait returned but the subscription still runs")
	}
}

// subscribeCounting subscribes to ch on c, counting confirmations and
// interruptions, with every message sent to got.
func subscribeCounting(t *testing.T, c valkey.Client, ch string) (s *valkeyplumbing.Subscription, ready, interrupted *atomic.Int64, got chan struct{}) {
	t.Helper()
	ready, interrupted, got = new(atomic.Int64), new(atomic.Int64), make(chan struct{}, 16)
	s = valkeyplumbing.Subscribe(c, ch, valkeyplumbing.Handlers{
		Ready:       func() { ready.Add(1) },
		Message:     func(string) { got <- struct{}{} },
		Interrupted: func() { interrupted.Add(1) },
	})
	t.Cleanup(s.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return s, ready, interrupted, got
}

// confirmedAgain waits until ready counts more than n confirmations, then
// publishes on ch and waits for the message.
func confirmedAgain(t *testing.T, c valkey.Client, ch string, ready *atomic.Int64, n int64, got <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ready.Load() <= n {
		select {
		case <-ctx.Done():
			t.Fatalf("Handlers.Ready ran %d times, want more than %d: the subscription was not confirmed again", ready.Load(), n)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := c.Do(ctx, c.B().Spublish().Channel(ch).Message("m").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-ctx.Done():
		t.Fatal("a message published after the subscription was confirmed again was not received")
	}
}

// TestSubscribeReadyAgainAfterRestart: after the server restarts, valkey-go
// subscribes again, and Handlers.Ready runs again, so that a waiter looks
// again for what it missed.
func TestSubscribeReadyAgainAfterRestart(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	c := faults.ValkeyClient(t, srv.Addr())
	ch := "valkeyplumbing-test:{restart}"
	_, ready, _, got := subscribeCounting(t, c, ch)
	srv.Kill()
	srv.Restart()
	confirmedAgain(t, c, ch, ready, 1, got)
}

// TestSubscribeSurvivesSlotMoves: a cluster node that gives up the
// channel's hash slot ends the subscription with SUNSUBSCRIBE; the
// Subscription reports the interruption, subscribes again on the slot's
// new node, and Handlers.Ready runs again.
func TestSubscribeSurvivesSlotMoves(t *testing.T) {
	t.Parallel()
	cl := testserver.StartValkeyCluster(t, 2)
	replica := cl.AddReplica(t, 0)
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := t.Context()
	// A channel whose slot the first primary serves.
	ch := ""
	for i := 0; ch == ""; i++ {
		name := fmt.Sprintf("valkeyplumbing-test:{%d}", i)
		slot, err := c.Do(ctx, c.B().ClusterKeyslot().Key(name).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if slot < 16384/2 {
			ch = name
		}
	}
	slot, _ := c.Do(ctx, c.B().ClusterKeyslot().Key(ch).Build()).AsInt64()
	_, ready, interrupted, got := subscribeCounting(t, c, ch)

	cl.Failover(t, replica)
	confirmedAgain(t, c, ch, ready, 1, got)
	if interrupted.Load() == 0 {
		t.Fatal("the failover did not interrupt the subscription; the test proves nothing")
	}

	n, i := ready.Load(), interrupted.Load()
	cl.MoveSlot(t, int(slot), 1)
	confirmedAgain(t, c, ch, ready, n, got)
	if interrupted.Load() == i {
		t.Fatal("moving the slot did not interrupt the subscription; the test proves nothing")
	}
}
