package leasequeue_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

// edgeTokens are tokens at the edges of exact arithmetic: a Lua number (a
// double) is exact up to 2^53, a PostgreSQL bigint ends at 2^63−1. Every
// one of them is far more than fence.MaxTokenLead ahead of any clock in
// microseconds (about 1.8·10^15 today), so no backend can have issued it.
var edgeTokens = []lease.Token{1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<63 - 1}

// checkImplausible fails t unless err reports tok as an implausible token
// of lease key, matching fence.ErrImplausibleToken.
func checkImplausible(t *testing.T, what string, err error, key string, tok lease.Token) {
	t.Helper()
	var ie *fence.ImplausibleTokenError
	if !errors.As(err, &ie) || !errors.Is(err, fence.ErrImplausibleToken) {
		t.Errorf("%s with token %d = %v; want a *fence.ImplausibleTokenError", what, tok, err)
		return
	}
	if ie.Key != key || ie.Token != tok || ie.Largest == 0 || ie.Largest >= tok {
		t.Errorf("%s with token %d: %+v; want key %q, the token, and a largest token below it", what, tok, ie, key)
	}
}

// TestForgedTokensAreImplausible: a snapshot whose token is far ahead of
// the source's clock (forged, or of a foreign lease) is refused by
// Complete and Fail with the fence's implausible-token error, and nothing
// is written; claims and Run go on over every item, the one the forged
// snapshot named included.
func TestForgedTokensAreImplausible(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store) {
		for i, tok := range edgeTokens {
			t.Run(fmt.Sprint(tok), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				name := fmt.Sprint("forged-", i)
				src := s.source(t, name)
				items := []string{"forged", "held", "h1", "h2", "h3"}
				mustEnqueue(ctx, t, src, items...)
				q := newQueue(t, s, src, "w", leasequeue.Options{Name: name, Policy: loadedPolicy(t, 2*time.Second),
					Concurrency: 3, PollEvery: 20 * time.Millisecond})

				// Complete and Fail of an item a real claim holds.
				c, err := q.Claim(ctx, "held")
				if err != nil {
					t.Fatal(err)
				}
				forged := lease.Snapshot{Key: c.Snapshot().Key, Owner: "forger", Token: tok}
				checkImplausible(t, "Complete", src.Complete(ctx, forged, "held"), forged.Key, tok)
				checkImplausible(t, "Fail", src.Fail(ctx, forged, "held", leasequeue.Failure{Err: errors.New("forged"), Dead: true}), forged.Key, tok)
				want := leasequeue.Item{ID: "held", State: leasequeue.Running, Attempts: 1,
					FenceKey: c.Snapshot().Key, Token: c.Snapshot().Token, Owner: "w"}
				if it := mustItem(ctx, t, src, "held"); it != want {
					t.Errorf("item after the forged Complete and Fail: %+v; want the claim's %+v", it, want)
				}
				if err := c.Complete(ctx); err != nil {
					t.Errorf("the real claim's Complete = %v", err)
				}

				// A claim of the other items goes through.
				cl := src.(leasequeue.Claimer)
				r := leasequeue.ClaimRequest{KeyPrefix: strings.TrimSuffix(q.Key("x"), "x"), Owner: "direct", Nonce: "n", TTL: time.Minute}
				direct := ""
				gs, err := cl.ClaimNext(ctx, r, 1)
				if err != nil || len(gs) != 1 {
					t.Errorf("ClaimNext after the forged writes = %+v, %v; want one item", gs, err)
				} else {
					direct = gs[0].ID
					if err := src.Complete(ctx, lease.Snapshot{Key: q.Key(direct), Owner: "direct", Token: gs[0].Token}, direct); err != nil {
						t.Fatalf("Complete of %q under the direct claim: %v", direct, err)
					}
				}

				// Run handles all the others.
				var mu sync.Mutex
				var handled []string
				runCtx, stop := context.WithCancel(ctx)
				defer stop()
				var wg sync.WaitGroup
				wg.Go(func() {
					if err := q.Run(runCtx, func(_ context.Context, c *leasequeue.Claim) error {
						mu.Lock()
						defer mu.Unlock()
						handled = append(handled, c.ID())
						return nil
					}); err != nil {
						t.Error(err)
					}
				})
				eventually(t, 30*time.Second, "every item done", func() bool {
					for _, id := range items {
						if it, err := src.Item(ctx, id); err != nil || it.State != leasequeue.Done {
							return false
						}
					}
					return true
				})
				stop()
				wg.Wait()
				slices.Sort(handled)
				wantHandled := slices.DeleteFunc(slices.Clone(items), func(id string) bool { return id == "held" || id == direct })
				slices.Sort(wantHandled)
				if !slices.Equal(handled, wantHandled) {
					t.Errorf("Run handled %q; want %q", handled, wantHandled)
				}
			})
		}
	})
}

// plantFence writes the fence of item id of the source's queue as a
// source of an older version, or an operator by hand, could have: lease
// key key, token tok.
type plantFence func(ctx context.Context, t *testing.T, src leasequeue.Source, id, key string, tok lease.Token)

// plantValkey writes the item's fence hash. It also moves the queue's
// items from the ready list to the due set, as Next hands them out, with
// the item at the head: claims then find it before the others.
func plantValkey(ctx context.Context, t *testing.T, src leasequeue.Source, id, key string, tok lease.Token) {
	t.Helper()
	c := valkeyClient(t, []string{testserver.Valkey(t).Addr()})
	vs := src.(*leasequeue.ValkeySource)
	ids, err := c.Do(ctx, c.B().Lrange().Key(vs.ReadyKey()).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	cmds := valkey.Commands{
		c.B().Hset().Key(vs.FenceKey(id)).FieldValue().FieldValue("key", key).FieldValue("token", tok.String()).FieldValue("owner", "planted").Build(),
		c.B().Del().Key(vs.ReadyKey()).Build(),
	}
	for _, other := range ids {
		score := 1.0
		if other == id {
			score = 0
		}
		cmds = append(cmds, c.B().Zadd().Key(vs.DueKey()).ScoreMember().ScoreMember(score, other).Build())
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// plantPostgres writes the item's fence columns.
func plantPostgres(ctx context.Context, t *testing.T, src leasequeue.Source, id, key string, tok lease.Token) {
	t.Helper()
	p := src.(*leasequeue.PostgresSource)
	tag, err := p.DB().Exec(ctx, `UPDATE `+p.Table()+` SET fence_key = $3, fence_token = $4, owner = 'planted' WHERE queue = $1 AND id = $2`,
		p.Queue(), id, key, int64(tok))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("plant the fence of %q: %v, %v", id, tag, err)
	}
}

// TestClaimTokensRiseAboveEveryFence: an item whose fence already holds a
// token at an edge of exact arithmetic (written before the sources
// refused implausible tokens, or by hand) is passed over by claims: no
// claim can get a plausible token above it. ClaimItem reports the fence's
// implausible-token error and writes nothing, and the claims of the
// queue's other items go on.
func TestClaimTokensRiseAboveEveryFence(t *testing.T) {
	plants := map[string]plantFence{"valkey": plantValkey, "postgres": plantPostgres}
	forEachStore(t, func(t *testing.T, s *store) {
		for i, tok := range edgeTokens {
			t.Run(fmt.Sprint(tok), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				name := fmt.Sprint("planted-", i)
				src := s.source(t, name)
				checkClaimsAboveFence(ctx, t, src, plants[s.name], name, tok, true)
			})
		}
	})
}

// TestValkeyClaimArithmeticIsExact runs the claims of
// TestClaimTokensRiseAboveEveryFence on a ValkeySource whose scripts admit
// every token up to about 2^63 ahead of the server's clock, so that the
// claim script adds to the planted fences instead of passing over them:
// its tokens are exact where a Lua number is not (2^53 + 1) and past the
// end of int64 (2^63 − 1 + 1).
func TestValkeyClaimArithmeticIsExact(t *testing.T) {
	t.Parallel()
	s := valkeyStore(t)
	for i, tok := range edgeTokens {
		t.Run(fmt.Sprint(tok), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			name := fmt.Sprint("exact-", i)
			src := s.source(t, name).(*leasequeue.ValkeySource).WithTokenLead(math.MaxInt64)
			checkClaimsAboveFence(ctx, t, src, plantValkey, name, tok, false)
			if it := mustItem(ctx, t, src, "planted"); it.State != leasequeue.Done || it.Token != tok+2 {
				t.Errorf("item after its two claims: %+v; want it done at token %d", it, tok+2)
			}
		})
	}
}

// checkClaimsAboveFence plants tok as the fence of an item of queue name
// on src and checks the claims that follow: with implausible, that the
// item is passed over, nothing written, and the other item claimed;
// otherwise that two claims of it, one after the other, get tokens that
// rise strictly above tok, that the first one's Complete is refused as
// stale and the second one's applies, and that the other item is claimed
// next. Either way no claim fails.
func checkClaimsAboveFence(ctx context.Context, t *testing.T, src leasequeue.Source, plant plantFence, name string, tok lease.Token, implausible bool) {
	prefix := name + "/items/"
	mustEnqueue(ctx, t, src.(source), "planted", "other")
	plant(ctx, t, src, "planted", prefix+"planted", tok)
	cl := src.(leasequeue.Claimer)
	req := func(n string) leasequeue.ClaimRequest {
		return leasequeue.ClaimRequest{KeyPrefix: prefix, Owner: "w-" + n, Nonce: n, TTL: time.Minute}
	}
	untouched := mustItem(ctx, t, src.(source), "planted")
	if untouched.State != leasequeue.Pending || untouched.FenceKey != prefix+"planted" || untouched.Token != tok {
		t.Fatalf("item with the planted fence: %+v", untouched)
	}

	g1, err := cl.ClaimItem(ctx, req("1"), "planted")
	if implausible {
		checkImplausible(t, "ClaimItem", err, prefix+"planted", tok)
		if it := mustItem(ctx, t, src.(source), "planted"); it != untouched {
			t.Errorf("item after the refused claim: %+v; want it untouched, %+v", it, untouched)
		}
		// Passed over: ClaimNext of one item takes the other one, at
		// the latest once the first call moved the planted item out of
		// its way.
		var gs []leasequeue.Granted
		for range 3 {
			if gs, err = cl.ClaimNext(ctx, req("2"), 1); err != nil || len(gs) != 0 {
				break
			}
		}
		if err != nil || len(gs) != 1 || gs[0].ID != "other" {
			t.Fatalf("ClaimNext of one item next to the implausible fence = %+v, %v; want the other item", gs, err)
		}
		if it := mustItem(ctx, t, src.(source), "planted"); it != untouched {
			t.Errorf("item after ClaimNext: %+v; want it untouched, %+v", it, untouched)
		}
		return
	}
	if err != nil {
		t.Fatalf("ClaimItem of the item fenced at %d = %v", tok, err)
	}
	if g1.Token <= tok {
		t.Errorf("first claim's token %d is not above the fence %d", g1.Token, tok)
	}
	if err := cl.ReleaseClaim(ctx, "planted", lease.Acquisition{Key: prefix + "planted", Owner: "w-1", Nonce: "1", Token: g1.Token}); err != nil {
		t.Fatalf("ReleaseClaim of the first claim: %v", err)
	}
	g2, err := cl.ClaimItem(ctx, req("2"), "planted")
	if err != nil {
		t.Fatalf("second ClaimItem = %v", err)
	}
	if g2.Token <= g1.Token {
		t.Errorf("second claim's token %d is not above the first's %d", g2.Token, g1.Token)
	}
	first := lease.Snapshot{Key: prefix + "planted", Owner: "w-1", Token: g1.Token}
	if err := cl.Complete(ctx, first, "planted"); !errors.Is(err, fence.ErrStale) {
		t.Errorf("Complete under the first, replaced claim = %v; want fence.ErrStale", err)
	}
	if it := mustItem(ctx, t, src.(source), "planted"); it.State != leasequeue.Running || it.Token != g2.Token || it.Owner != "w-2" {
		t.Errorf("item after the replaced claim's Complete: %+v; want it running under the second claim, token %d", it, g2.Token)
	}
	if err := cl.Complete(ctx, lease.Snapshot{Key: prefix + "planted", Owner: "w-2", Token: g2.Token}, "planted"); err != nil {
		t.Errorf("Complete under the second claim = %v", err)
	}
	gs, err := cl.ClaimNext(ctx, req("3"), 2)
	if err != nil || len(gs) != 1 || gs[0].ID != "other" {
		t.Fatalf("ClaimNext after the planted item's claims = %+v, %v; want the other item", gs, err)
	}
}
