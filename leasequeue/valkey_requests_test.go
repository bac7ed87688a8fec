package leasequeue_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

// countingClient is a valkey.Client that counts the commands it sends,
// by name; scripts count as the one EVALSHA (or EVAL, SCRIPT LOAD) that
// carries them.
type countingClient struct {
	valkey.Client
	mu   sync.Mutex
	sent map[string]int
}

func (c *countingClient) count(cmds ...valkey.Completed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		c.sent[strings.ToLower(strings.Join(cmd.Commands()[:min(2, len(cmd.Commands()))], " "))]++
	}
}

func (c *countingClient) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	c.count(cmd)
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoMulti(ctx context.Context, cmds ...valkey.Completed) []valkey.ValkeyResult {
	c.count(cmds...)
	return c.Client.DoMulti(ctx, cmds...)
}

// take returns the commands sent since the last call, by name (with the
// first argument, to tell EVALSHA hashes apart), and how many in all.
func (c *countingClient) take() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sent, n := c.sent, 0
	for _, k := range sent {
		n += k
	}
	c.sent = map[string]int{}
	return sent, n
}

// TestValkeyClaimAndFinishAreOneScriptEach counts, on a counting client,
// the requests of a Queue on the Valkey source: one EVALSHA to claim an
// item (Claim, or a share of one for ClaimNext), one to complete or fail
// it, and none to the lease backend.
func TestValkeyClaimAndFinishAreOneScriptEach(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &countingClient{Client: valkeyClient(t, []string{testserver.Valkey(t).Addr()}), sent: map[string]int{}}
	src, err := leasequeue.NewValkeySource(c, "counted", leasequeue.ValkeyOptions{Prefix: fmt.Sprintf("count%d-%d:", time.Now().UnixNano()%1e6, prefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	mustEnqueue(ctx, t, src, "warm", "a", "b", "c", "d")
	q := newQueue(t, &store{backend: func(t testing.TB) lease.Backend { return noBackend{t} }}, src, "w",
		leasequeue.Options{Name: "counted", Policy: newPolicy(t, lease.PolicyOptions{TTL: time.Minute})})
	// The first use of each script loads it (SCRIPT LOAD).
	warm, err := q.Claim(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Fail(ctx, errors.New("warm up")); err != nil {
		t.Fatal(err)
	}
	if err := src.Complete(ctx, lease.Snapshot{Key: q.Key("x"), Owner: "w", Token: 1}, "x"); !errors.Is(err, leasequeue.ErrNotFound) {
		t.Fatalf("Complete of an unknown item = %v; want ErrNotFound", err)
	}
	c.take()

	one := func(what string) {
		t.Helper()
		if sent, n := c.take(); n != 1 || !strings.HasPrefix(slices.Collect(maps.Keys(sent))[0], "evalsha ") {
			t.Errorf("%s sent %v; want one EVALSHA", what, sent)
		}
	}
	cl, err := q.Claim(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	one("Claim")
	if err := cl.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	one("Complete")

	gs, err := src.ClaimNext(ctx, leasequeue.ClaimRequest{KeyPrefix: strings.TrimSuffix(q.Key("x"), "x"), Owner: "w", Nonce: "n", TTL: time.Minute}, 3)
	if ids := slices.Sorted(func(yield func(string) bool) {
		for _, g := range gs {
			yield(g.ID)
		}
	}); err != nil || !slices.Equal(ids, []string{"b", "c", "d"}) {
		t.Fatalf("ClaimNext = %+v, %v; want b, c and d", gs, err)
	}
	one("ClaimNext of three items")
	snap := lease.Snapshot{Key: q.Key(gs[0].ID), Owner: "w", Token: gs[0].Token}
	if err := src.Fail(ctx, snap, gs[0].ID, leasequeue.Failure{Err: errors.New("no"), RetryAfter: time.Hour}); err != nil {
		t.Fatal(err)
	}
	one("Fail")
}
