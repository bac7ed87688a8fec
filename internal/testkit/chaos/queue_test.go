package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	leasepostgres "github.com/golib/lease/backends/postgres"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasetest"
)

// queueItems are the queues of the queue row and their items. Queue
// "orders" item "eu/<n>" and queue "orders/eu" item "<n>" are different
// items whose names run together: a source must keep them apart.
func queueItems(n int) map[string][]string {
	items := map[string][]string{}
	for i := 1; i <= n; i++ {
		items["orders"] = append(items["orders"], strconv.Itoa(i), fmt.Sprintf("eu/%d", i))
		items["orders/eu"] = append(items["orders/eu"], strconv.Itoa(i))
	}
	return items
}

// queueSide is one worker's connection to a source: its queue and how it
// completes a claim with a write of its own that records the token.
type queueSide struct {
	q        *leasequeue.Queue
	src      leasequeue.Source
	complete func(ctx context.Context, c *leasequeue.Claim) error
	close    func()
}

// queueStore is one kind of source in the queue row.
type queueStore struct {
	name string
	// workers is how many workers share each side (1 if 0). With more
	// than one, a side's workers complete their claims on the ticks of a
	// 250ms clock, so that their completions overlap, which
	// PostgresSource sends in batches; and the first side of each queue
	// is a paused process: its clock stands still, so it never renews its
	// claims and never sees them expire, and its workers complete one to
	// two TTLs after they claimed, when others may have taken the items
	// over: its completions reach the server, stale, in batches.
	workers int
	// open connects a worker of queue to addr (a proxy of the server),
	// on clock (the system's if nil).
	open func(t *testing.T, addr, queue, owner string, clock lease.Clock) queueSide
	// upstream is the server's address, behind the proxies.
	upstream string
	// enqueue adds the items, item reads an item's state (gone if the
	// source has no such item) and the tokens its completions recorded;
	// both go to the server directly.
	enqueue func(t *testing.T, queue string, ids []string)
	item    func(t *testing.T, queue, id string) (state string, gone bool, completions []uint64)
	// batched, if set, counts the completions that committed in one
	// transaction with others.
	batched func(t *testing.T) int
	// sweeper returns a lease.Sweeper of queue through addr: the source
	// itself or, if broken, a pruner that removes the queue's items (ids)
	// whatever their state.
	sweeper func(t *testing.T, addr, queue string, ids []string, broken bool) lease.Sweeper
	// journal starts recording the removals of items, as the store sees
	// them, whatever request makes them; the function it returns returns
	// those recorded so far.
	journal func(t *testing.T, items map[string][]string) func(t *testing.T) map[[2]string]removal
}

// removal is what a store recorded of the removals of one item.
type removal struct {
	n      int       // how many
	states []string  // the item's state when removed, where the store records it
	at     time.Time // when the first record reached the test, where it is known
}

// pruneRetention is the DoneRetention and DeadRetention of the sources in
// the pruned rows: far below the TTL, so that an item taken over from a
// late worker is completed and removed before the late worker's
// completion arrives.
const pruneRetention = 150 * time.Millisecond

// align is the period of the clock on whose ticks the store's workers
// complete (see queueStore.workers), or 0.
func (st queueStore) align() time.Duration {
	if st.workers > 1 {
		return 250 * time.Millisecond
	}
	return 0
}

// valkeyQueueStore is the Valkey source, keeping finished items for
// retention (0: the defaults).
func valkeyQueueStore(t *testing.T, retention time.Duration) queueStore {
	addr := testserver.Valkey(t).Addr()
	prefix := valkeyTarget(addr).Prefix
	source := func(c valkey.Client, queue string) *leasequeue.ValkeySource {
		s, err := leasequeue.NewValkeySource(c, queue, leasequeue.ValkeyOptions{Prefix: prefix + "q:",
			DoneRetention: retention, DeadRetention: retention})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	direct, err := valkeyTarget(addr).ValkeyClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	return queueStore{
		name: "valkey", upstream: addr,
		open: func(t *testing.T, proxied, queue, owner string, clock lease.Clock) queueSide {
			c, err := valkeyTarget(proxied).ValkeyClient(proxied)
			if err != nil {
				t.Fatal(err)
			}
			b, err := leasevalkey.New(c, leasevalkey.Options{Prefix: prefix + "lease:"})
			if err != nil {
				t.Fatal(err)
			}
			src := source(c, queue)
			return queueSide{q: newQueue(t, b, src, queue, owner, clock), src: src, close: c.Close,
				complete: func(ctx context.Context, cl *leasequeue.Claim) error {
					return src.CompleteClaimWith(ctx, cl, fencevalkey.XAdd(src.ItemKey(cl.ID(), "effects"), fencevalkey.XAddOptions{},
						"token", strconv.FormatUint(uint64(cl.Snapshot().Token), 10)))
				}}
		},
		enqueue: func(t *testing.T, queue string, ids []string) {
			if _, err := source(direct, queue).Enqueue(ctxT(t), ids...); err != nil {
				t.Fatal(err)
			}
		},
		// The effects stream is a key of our own made with ItemKey: a
		// sweep removes the item's hash and (unless it was completed with
		// commands, as here) its fence, never such keys, so the stream
		// outlives the item.
		item: func(t *testing.T, queue, id string) (string, bool, []uint64) {
			src := source(direct, queue)
			it, err := src.Item(ctxT(t), id)
			gone := errors.Is(err, leasequeue.ErrNotFound)
			if err != nil && !gone {
				t.Fatalf("item %q of %q: %v", id, queue, err)
			}
			entries, err := direct.Do(ctxT(t), direct.B().Xrange().Key(src.ItemKey(id, "effects")).Start("-").End("+").Build()).AsXRange()
			if err != nil {
				t.Fatal(err)
			}
			var tokens []uint64
			for _, e := range entries {
				tok, _ := strconv.ParseUint(e.FieldValues["token"], 10, 64)
				tokens = append(tokens, tok)
			}
			return string(it.State), gone, tokens
		},
		sweeper: func(t *testing.T, proxied, queue string, ids []string, broken bool) lease.Sweeper {
			c, err := valkeyTarget(proxied).ValkeyClient(proxied)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			if broken {
				return brokenValkeyPruner(c, source(c, queue), ids)
			}
			return source(c, queue)
		},
		journal: func(t *testing.T, items map[string][]string) func(t *testing.T) map[[2]string]removal {
			keys := map[string][2]string{}
			for queue, ids := range items {
				src := source(direct, queue)
				for _, id := range ids {
					keys[src.ItemKey(id, "item")] = [2]string{queue, id}
				}
			}
			return valkeyRemovals(t, addr, direct, prefix, keys)
		},
	}
}

// brokenValkeyPruner is a pruner of src's items ids that deletes their
// hashes whatever their state, as a sweep that forgot its checks would,
// o.Limit IDs a page.
func brokenValkeyPruner(c valkey.Client, src *leasequeue.ValkeySource, ids []string) lease.Sweeper {
	return sweepFunc(func(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
		from, _ := strconv.Atoi(o.Cursor)
		from = min(max(from, 0), len(ids))
		to := min(len(ids), from+max(o.Limit, 1))
		var page lease.SweepPage
		for _, id := range ids[from:to] {
			n, err := c.Do(ctx, c.B().Del().Key(src.ItemKey(id, "item")).Build()).AsInt64()
			if err != nil {
				return lease.SweepPage{}, lease.Indeterminate(err)
			}
			if n > 0 {
				page.Removed = append(page.Removed, id)
			}
		}
		if to < len(ids) {
			page.Next = strconv.Itoa(to)
		}
		return page, nil
	})
}

// keyEvents counts the users of the Valkey server's keyspace events, which
// the first one turns on and the last one restores.
var keyEvents struct {
	mu    sync.Mutex
	users int
	was   string
}

// valkeyRemovals records the deletions of keys (an item's hash, named by
// its queue and ID) from the server's keyspace events (notify-keyspace-
// events "Eg", on for the time of the test): the prune script deletes an
// item's hash with DEL, and each DEL of a key publishes the key's name on
// __keyevent@0__:del, to a subscriber of the test's own on a connection
// of its own. The function it returns first deletes a key of its own and
// waits for that event: by then every event published before it has
// arrived.
func valkeyRemovals(t *testing.T, addr string, direct valkey.Client, prefix string, keys map[string][2]string) func(t *testing.T) map[[2]string]removal {
	const param = "notify-keyspace-events"
	ctx := ctxT(t)
	keyEvents.mu.Lock()
	if keyEvents.users == 0 {
		was, err := direct.Do(ctx, direct.B().ConfigGet().Parameter(param).Build()).AsStrMap()
		if err == nil {
			err = direct.Do(ctx, direct.B().ConfigSet().ParameterValue().ParameterValue(param, was[param]+"Eg").Build()).Error()
		}
		if err != nil {
			keyEvents.mu.Unlock()
			t.Fatalf("turn on keyspace events: %v", err)
		}
		keyEvents.was = was[param]
	}
	keyEvents.users++
	keyEvents.mu.Unlock()
	t.Cleanup(func() {
		keyEvents.mu.Lock()
		defer keyEvents.mu.Unlock()
		if keyEvents.users--; keyEvents.users == 0 {
			_ = direct.Do(context.Background(), direct.B().ConfigSet().ParameterValue().ParameterValue(param, keyEvents.was).Build()).Error()
		}
	})

	sub, err := valkeyTarget(addr).ValkeyClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		got    = map[[2]string]removal{}
		marks  = map[string]bool{}
		subErr error
	)
	markPrefix := prefix + "chaos-mark/"
	sctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		err := sub.Receive(sctx, sub.B().Subscribe().Channel("__keyevent@0__:del").Build(), func(m valkey.PubSubMessage) {
			at := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if item, ok := keys[m.Message]; ok {
				r := got[item]
				r.n++
				if r.at.IsZero() {
					r.at = at
				}
				got[item] = r
			} else if strings.HasPrefix(m.Message, markPrefix) {
				marks[m.Message] = true
			}
		})
		mu.Lock()
		subErr = err
		mu.Unlock()
	}()
	t.Cleanup(func() {
		cancel()
		<-ended
		sub.Close()
	})
	n := 0
	mark := func(t *testing.T) {
		n++
		k := fmt.Sprintf("%s%d", markPrefix, n)
		for try := 0; try < 100; try++ {
			if err := direct.Do(ctx, direct.B().Set().Key(k).Value("1").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if err := direct.Do(ctx, direct.B().Del().Key(k).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			for range 10 {
				time.Sleep(10 * time.Millisecond)
				mu.Lock()
				seen, err := marks[k], subErr
				mu.Unlock()
				if err != nil && sctx.Err() == nil {
					t.Fatalf("keyspace events: the subscription ended: %v", err)
				}
				if seen {
					return
				}
			}
		}
		t.Fatal("keyspace events: no event for a key deleted 100 times")
	}
	mark(t) // the subscription is on
	return func(t *testing.T) map[[2]string]removal {
		mark(t)
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(got)
	}
}

// postgresQueueStore is the PostgreSQL source, keeping finished items for
// retention (0: the defaults).
func postgresQueueStore(t *testing.T, retention time.Duration) queueStore {
	return postgresQueue(t, false, retention)
}

// postgresBatchedQueueStore is the PostgreSQL source with four workers
// per side completing with Claim.Complete, whose overlapping completions
// the source sends in batches. The completions are recorded by a trigger
// in the statement that marks an item done, whichever statement it is.
func postgresBatchedQueueStore(t *testing.T, retention time.Duration) queueStore {
	return postgresQueue(t, true, retention)
}

// queueStores open the kinds of source of the queue rows.
var queueStores = []func(*testing.T, time.Duration) queueStore{valkeyQueueStore, postgresQueueStore, postgresBatchedQueueStore}

// doneTrigger records every write that marks an item done, with its
// token, in chaos_effects, in the transaction of the write.
const doneTrigger = `
CREATE FUNCTION chaos_record_done() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_effects (queue, id, token) VALUES (NEW.queue, NEW.id, NEW.fence_token);
    RETURN NEW;
END $$;
CREATE TRIGGER chaos_record_done AFTER UPDATE ON leasequeue_jobs
    FOR EACH ROW WHEN (NEW.state = 'done') EXECUTE FUNCTION chaos_record_done()`

// removedTrigger records every deletion of an item, with the state it was
// in, in chaos_removed, in the transaction of the deletion.
const removedTrigger = `
CREATE TABLE chaos_removed (queue text, id text, state text, token bigint);
CREATE FUNCTION chaos_record_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_removed (queue, id, state, token) VALUES (OLD.queue, OLD.id, OLD.state, OLD.fence_token);
    RETURN OLD;
END $$;
CREATE TRIGGER chaos_record_removed AFTER DELETE ON leasequeue_jobs
    FOR EACH ROW EXECUTE FUNCTION chaos_record_removed()`

// brokenPrune deletes up to $3 items of queue $1 not written for $2
// microseconds, whatever their state: prune.sql without its checks.
const brokenPrune = `
DELETE FROM public.leasequeue_jobs
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM public.leasequeue_jobs
    WHERE queue = $1::text AND updated_at <= statement_timestamp() - $2::bigint * interval '1 microsecond'
    ORDER BY updated_at, id
    LIMIT $3::integer))
RETURNING id`

func postgresQueue(t *testing.T, batched bool, retention time.Duration) queueStore {
	dbURL := postgresDB(t)
	ctx := ctxT(t)
	direct, err := chaos.Pool(ctx, dbURL, "chaos-queue-admin", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	if err := leasequeue.MigratePostgres(ctx, direct, leasequeue.PostgresOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Exec(ctx, `CREATE TABLE chaos_effects (queue text, id text, token bigint, xact bigint DEFAULT txid_current())`); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Exec(ctx, removedTrigger); err != nil {
		t.Fatal(err)
	}
	name, workers := "postgres", 1
	if batched {
		if _, err := direct.Exec(ctx, doneTrigger); err != nil {
			t.Fatal(err)
		}
		name, workers = "postgres-batched", 4
	}
	source := func(db leasequeue.PostgresDB, queue string) *leasequeue.PostgresSource {
		s, err := leasequeue.NewPostgresSource(db, queue, leasequeue.PostgresOptions{DoneRetention: retention, DeadRetention: retention})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return queueStore{
		name: name, workers: workers, upstream: u.Host,
		batched: batchCount(batched, direct),
		open: func(t *testing.T, proxied, queue, owner string, clock lease.Clock) queueSide {
			pu := *u
			pu.Host = proxied
			pool, err := chaos.Pool(ctxT(t), pu.String(), owner, 4)
			if err != nil {
				t.Fatal(err)
			}
			b, err := leasepostgres.New(pool, leasepostgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			src := source(pool, queue)
			complete := func(ctx context.Context, cl *leasequeue.Claim) error { return cl.Complete(ctx) }
			if !batched {
				complete = func(ctx context.Context, cl *leasequeue.Claim) error {
					return src.CompleteTx(ctx, cl, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `INSERT INTO chaos_effects (queue, id, token) VALUES ($1, $2, $3)`, queue, cl.ID(), int64(cl.Snapshot().Token))
						return err
					})
				}
			}
			return queueSide{q: newQueue(t, b, src, queue, owner, clock), src: src, close: func() { _ = b.Close(); pool.Close() },
				complete: complete}
		},
		enqueue: func(t *testing.T, queue string, ids []string) {
			if _, err := source(direct, queue).Enqueue(ctxT(t), ids...); err != nil {
				t.Fatal(err)
			}
		},
		item: func(t *testing.T, queue, id string) (string, bool, []uint64) {
			it, err := source(direct, queue).Item(ctxT(t), id)
			gone := errors.Is(err, leasequeue.ErrNotFound)
			if err != nil && !gone {
				t.Fatalf("item %q of %q: %v", id, queue, err)
			}
			return string(it.State), gone, effects(t, direct, queue, id)
		},
		sweeper: func(t *testing.T, proxied, queue string, _ []string, broken bool) lease.Sweeper {
			pu := *u
			pu.Host = proxied
			pool, err := chaos.Pool(ctxT(t), pu.String(), "chaos-pruner", 2)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			if !broken {
				return source(pool, queue)
			}
			return sweepFunc(func(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
				rows, err := pool.Query(ctx, brokenPrune, queue, retention.Microseconds(), max(o.Limit, 1))
				if err != nil {
					return lease.SweepPage{}, lease.Indeterminate(err)
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					return lease.SweepPage{}, lease.Indeterminate(err)
				}
				return lease.SweepPage{Removed: ids}, nil
			})
		},
		journal: func(t *testing.T, _ map[string][]string) func(t *testing.T) map[[2]string]removal {
			return func(t *testing.T) map[[2]string]removal {
				rows, err := direct.Query(ctxT(t), `SELECT queue, id, state FROM chaos_removed`)
				if err != nil {
					t.Fatal(err)
				}
				got := map[[2]string]removal{}
				var queue, id, state string
				if _, err := pgx.ForEachRow(rows, []any{&queue, &id, &state}, func() error {
					r := got[[2]string{queue, id}]
					r.n++
					r.states = append(r.states, state)
					got[[2]string{queue, id}] = r
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				return got
			}
		},
	}
}

// batchCount returns, for a batched store, the function that counts the
// completions in chaos_effects that committed in one transaction with
// others; nil otherwise.
func batchCount(batched bool, direct *pgxpool.Pool) func(t *testing.T) int {
	if !batched {
		return nil
	}
	return func(t *testing.T) int {
		var n int
		err := direct.QueryRow(ctxT(t), `SELECT coalesce(sum(c), 0) FROM (SELECT count(*) AS c FROM chaos_effects GROUP BY xact HAVING count(*) > 1) AS x`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

func effects(t *testing.T, db *pgxpool.Pool, queue, id string) []uint64 {
	rows, err := db.Query(ctxT(t), `SELECT token FROM chaos_effects WHERE queue = $1 AND id = $2`, queue, id)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, tok := range toks {
		out = append(out, uint64(tok))
	}
	return out
}

func newQueue(t *testing.T, b lease.Backend, src leasequeue.Source, queue, owner string, clock lease.Clock) *leasequeue.Queue {
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: owner, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	q, err := leasequeue.New(c, src, leasequeue.Options{Name: queue, Policy: rowPolicy(t), MaxAttempts: 1000,
		RetryDelay: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// claims collects the tokens of the claims that began an attempt, and
// the completion calls.
type claims struct {
	mu    sync.Mutex
	m     map[[2]string][]uint64
	calls map[[2]string][]chaos.CompletionCall
	stale atomic.Int64 // completions the fence refused
}

func newClaims() *claims {
	return &claims{m: map[[2]string][]uint64{}, calls: map[[2]string][]chaos.CompletionCall{}}
}

func (c *claims) add(queue, id string, tok lease.Token) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[[2]string{queue, id}] = append(c.m[[2]string{queue, id}], uint64(tok))
}

func (c *claims) call(queue, id string, call chaos.CompletionCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[[2]string{queue, id}] = append(c.calls[[2]string{queue, id}], call)
}

// work claims ready items of side's queue and completes each after a
// while (if paused is not 0, paused to paused + a TTL; then on the next
// tick of a clock of period align, if align is not 0), without watching
// the claim's context, as a handler that is slow to notice its loss does,
// until ctx ends.
func work(ctx context.Context, side queueSide, queue string, cl *claims, seed uint64, align, paused time.Duration) {
	rng := rand.New(rand.NewPCG(seed, 0x9))
	timeout := 2 * rowPolicyOptions.OperationTimeout
	for ctx.Err() == nil {
		nctx, cancel := context.WithTimeout(ctx, timeout)
		cs, err := side.q.ClaimNext(nctx, 1)
		cancel()
		if err != nil || len(cs) == 0 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		c := cs[0]
		tok := c.Snapshot().Token
		cl.add(queue, c.ID(), tok)
		if paused > 0 {
			time.Sleep(paused + time.Duration(rng.Int64N(int64(ttl))))
		} else {
			time.Sleep(time.Duration(rng.Int64N(int64(ttl / 2))))
		}
		if align > 0 {
			time.Sleep(time.Until(time.Now().Truncate(align).Add(align)))
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		began := time.Now()
		err = side.complete(cctx, c)
		cancel()
		cl.call(queue, c.ID(), chaos.CompletionCall{Token: uint64(tok), Began: began, Accepted: err == nil})
		if errors.Is(err, fence.ErrStale) {
			cl.stale.Add(1)
		}
	}
}

// TestQueueExactlyOnce runs workers of two queues, on PostgreSQL and on
// Valkey, each worker through a proxy of its own, and cuts one worker off
// (a blackhole, both ways) for one and a half to two and a half TTLs
// again and again: its claims' leases expire, other workers claim the
// items again, and the cut-off worker, which does not watch its claim's
// context, completes them late. Every completion writes the claim's token
// in the same transaction (CompleteTx) or fenced group (CompleteClaimWith)
// as the completion. After the faults a worker drains each queue; then
// every item must have been completed exactly once, by the claim with
// the highest token (see chaos.CheckQueue). Queue "orders" item "eu/1"
// and queue "orders/eu" item "1" must stay two items.
func TestQueueExactlyOnce(t *testing.T) {
	for _, open := range queueStores {
		st := open(t, 0)
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			reportQueue(t, queueRow(t, st, queueRowOptions{}))
		})
	}
}

// TestQueuePruned is the row of TestQueueExactlyOnce on sources that keep
// a finished item for only pruneRetention (done and dead alike), with two
// pruners beside the workers that walk both queues' Sweep pages every
// 20ms: one on a connection of its own, one through a proxy that the
// nemesis, while it faults a worker, slows past the TTL each way (so that
// its sweeps arrive late) or cuts off, in turn. On every source the first
// side of each queue is a paused process (see queueStore.workers) of at
// least two workers, whose completions arrive one and a half to two and a
// half TTLs after they claimed, mostly after others took their items
// over, completed and removed them; every second fault slows a worker's
// proxy instead of cutting it off. The stores record each removal
// themselves, whatever request makes it (a trigger on PostgreSQL, with
// the item's state; keyspace events on Valkey), since a sweep's reply can
// be lost.
//
// Then chaos.CheckQueue holds as before, and an item that is gone must
// have been removed once, done (on PostgreSQL), listed by a sweep (or
// removed by one whose reply was lost), and completed exactly once, by
// the claim with the highest token; no completion that began after its
// removal may be accepted or leave a write. The row fails if nothing was
// removed or no completion began after its item's removal.
func TestQueuePruned(t *testing.T) {
	for _, open := range queueStores {
		st := open(t, pruneRetention)
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			reportQueue(t, queueRow(t, st, queueRowOptions{prune: true}))
		})
	}
}

// TestQueuePrunedCatchesBrokenPruner runs the row of TestQueuePruned with
// pruners that remove items whatever their state (on PostgreSQL a DELETE
// of the items not written for the retention, without prune.sql's checks;
// on Valkey a DEL of the items' hashes): the checker must report problems.
// It shows that the row can fail.
func TestQueuePrunedCatchesBrokenPruner(t *testing.T) {
	stores := queueStores[:2]
	if !long() {
		stores = stores[1:2] // the short form shows the failure on one source; the long form on both
	}
	for _, open := range stores {
		st := open(t, pruneRetention)
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			res := queueRow(t, st, queueRowOptions{prune: true, broken: true})
			if len(res.problems) == 0 {
				t.Fatalf("a pruner that removes items in any state (%d removed) went unnoticed", res.removed)
			}
			t.Logf("the broken pruners removed %d items; the checker reports %d problems, as it should; the first:\n%s",
				res.removed, len(res.problems), res.problems[0])
		})
	}
}

// queueRowOptions vary the queue row.
type queueRowOptions struct {
	// prune runs the pruners of TestQueuePruned.
	prune bool
	// broken makes the pruners remove items whatever their state.
	broken bool
}

// queueResult is what a queue row found.
type queueResult struct {
	problems []string
	summary  string
	removed  int // items the store recorded removed
	listed   int // items the pruners' sweeps listed removed
	late     int // completion calls that began after their item's removal, refused
}

// reportQueue logs the row's summary and fails t on its problems.
func reportQueue(t *testing.T, res queueResult) {
	t.Helper()
	t.Logf("chaos-summary %s: %s (ran %v)", t.Name(), res.summary, rowDuration(t))
	for _, p := range res.problems {
		t.Error(p)
	}
}

// prunes is what the pruners of a row saw.
type prunes struct {
	mu     sync.Mutex
	listed map[[2]string]int
	first  map[[2]string]time.Time // when the first reply that listed the item came
	lost   map[string]int          // per queue, the sweeps whose outcome is unknown
	sweeps atomic.Int64
}

// queueSweeper is a pruner's sweeper of one queue.
type queueSweeper struct {
	queue string
	s     lease.Sweeper
}

// pruneLoop walks each sweeper's pages from end to end, two items a page,
// until stop is set; a sweep that fails starts the next walk. It finishes
// the sweep in flight, which its context bounds to four TTLs, long enough
// for a reply slowed past the TTL both ways.
func pruneLoop(stop *atomic.Bool, sweepers []queueSweeper, pr *prunes) {
	for !stop.Load() {
		for _, s := range sweepers {
			cursor := ""
			for !stop.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), 4*ttl)
				page, err := s.s.Sweep(ctx, lease.SweepOptions{Cursor: cursor, Limit: 2})
				cancel()
				at := time.Now()
				pr.sweeps.Add(1)
				pr.mu.Lock()
				if err == nil {
					for _, id := range page.Removed {
						k := [2]string{s.queue, id}
						pr.listed[k]++
						if _, ok := pr.first[k]; !ok {
							pr.first[k] = at
						}
					}
				} else if errors.Is(err, lease.ErrIndeterminate) {
					pr.lost[s.queue]++
				}
				pr.mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					break
				}
				if page.Next == "" {
					break
				}
				cursor = page.Next
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// queueRow runs the queue row on st and checks it.
func queueRow(t *testing.T, st queueStore, o queueRowOptions) queueResult {
	n := max(6, 3*int(rowDuration(t)/time.Second)) * min(2, max(1, st.workers)) // enough work for the whole row
	if o.prune {
		n *= 2 // for the paused side's second worker, and the time the row may go on for
	}
	items := queueItems(n)
	queues := []string{"orders", "orders/eu"}
	var journal func(*testing.T) map[[2]string]removal
	if o.prune {
		journal = st.journal(t, items)
	}
	for queue, ids := range items {
		st.enqueue(t, queue, ids)
	}
	cl := newClaims()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg      sync.WaitGroup
		proxies []*chaos.Proxy
		sides   []queueSide
	)
	// Paused sides and slowed workers where the store batches or the row
	// prunes.
	late := st.workers > 1 || o.prune
	i := 0
	for _, queue := range queues {
		for k := range 2 {
			p := newProxy(t, st.upstream)
			// A paused side completes one to two TTLs after it claimed;
			// where the row prunes, one and a half to two and a half,
			// so that most of its items were taken over, completed and
			// removed by then.
			var paused time.Duration
			var clock lease.Clock
			if late && k == 0 {
				paused, clock = ttl, leasetest.NewFakeClock(time.Now())
				if o.prune {
					paused = 3 * ttl / 2
				}
			}
			side := st.open(t, p.Addr(), queue, fmt.Sprintf("chaos-q%d", i), clock)
			proxies, sides = append(proxies, p), append(sides, side)
			workers := max(1, st.workers)
			if o.prune && paused > 0 {
				workers = max(workers, 2) // more late completions
			}
			for range workers {
				wg.Add(1)
				go func(seed uint64) {
					defer wg.Done()
					work(ctx, side, queue, cl, seed, st.align(), paused)
				}(uint64(i + 1))
				i++
			}
		}
	}
	// The pruners: one straight to the server, one through pp.
	pr := &prunes{listed: map[[2]string]int{}, first: map[[2]string]time.Time{}, lost: map[string]int{}}
	var (
		stopPrune atomic.Bool
		pwg       sync.WaitGroup
		pp        *chaos.Proxy
	)
	if o.prune {
		pp = newProxy(t, st.upstream)
		for _, addr := range []string{st.upstream, pp.Addr()} {
			var sweepers []queueSweeper
			for _, queue := range queues {
				sweepers = append(sweepers, queueSweeper{queue, st.sweeper(t, addr, queue, items[queue], o.broken)})
			}
			pwg.Add(1)
			go func() {
				defer pwg.Done()
				pruneLoop(&stopPrune, sweepers, pr)
			}()
		}
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x9))
	until := time.Now().Add(rowDuration(t))
	cuts, slowed, cutPruner := 0, 0, 0
	// Where the row prunes, it faults at least twice, so that the proxied
	// pruner is both slowed and cut off, and goes on for up to
	// maxUnknownWait past its end while no completion has begun after its
	// item was removed (as a sweep listed it): a short run may, by chance,
	// have none.
	running := func() bool {
		return time.Now().Before(until) || o.prune && cuts < 2 ||
			o.prune && !o.broken && time.Now().Before(until.Add(maxUnknownWait)) && lateSoFar(cl, pr) == 0
	}
	start := time.Now()
	for running() {
		time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(700*time.Millisecond))))
		p := proxies[rng.IntN(len(proxies))]
		if late && cuts%2 == 1 {
			// Late instead of lost: what the side sends arrives after
			// its claims expired and others took the items over.
			lat := ttl.Milliseconds() * 3 / 4
			toxic(t, p, chaos.Both("latency", map[string]any{"latency": lat, "jitter": lat / 10})...)
		} else {
			toxic(t, p, chaos.Both("timeout", map[string]any{"timeout": 0})...)
		}
		// The proxied pruner, for the same time: slowed past the TTL
		// each way and cut off (a blackhole) in turn.
		if pp != nil {
			if cuts%2 == 0 {
				toxic(t, pp, chaos.Both("latency", map[string]any{"latency": int(3 * ttl / 2 / time.Millisecond)})...)
				slowed++
			} else {
				toxic(t, pp, chaos.Both("timeout", map[string]any{"timeout": 0})...)
				cutPruner++
			}
		}
		time.Sleep(3*ttl/2 + time.Duration(rng.Int64N(int64(ttl))))
		heal(t, p)
		if pp != nil {
			heal(t, pp)
		}
		cuts++
	}
	faulted := time.Since(start).Round(100 * time.Millisecond)
	cancel()
	wg.Wait()
	for _, s := range sides {
		s.close()
	}
	// Drain: as many workers per queue as a side has (at least four where
	// the row prunes, which has twice the items), straight to the server,
	// until every item is done (or gone) or a generous while has passed.
	// The pruners go on meanwhile.
	drainers := max(1, st.workers)
	if o.prune {
		drainers = max(drainers, 4)
	}
	dctx, dcancel := context.WithCancel(context.Background())
	for j, queue := range queues {
		side := st.open(t, st.upstream, queue, fmt.Sprintf("chaos-drain%d", j), nil)
		defer side.close()
		for k := range drainers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				work(dctx, side, queue, cl, uint64(100+10*j+k), 0, 0)
			}()
		}
	}
	deadline := time.Now().Add(30 * ttl)
	for {
		pending := 0
		for queue, ids := range items {
			for _, id := range ids {
				if state, gone, _ := st.item(t, queue, id); !gone && state != string(leasequeue.Done) {
					pending++
				}
			}
		}
		if pending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(ttl / 2)
	}
	dcancel()
	wg.Wait()
	if o.prune {
		// Stop the pruners: each finishes its sweep in flight; cutting
		// pp off ends the proxied one's at once and closes its
		// connections, so that nothing it sent arrives later. A request
		// that reached the server has been applied a moment later.
		stopPrune.Store(true)
		if err := pp.Cut(); err != nil {
			t.Fatal(err)
		}
		pwg.Wait()
		time.Sleep(100 * time.Millisecond)
	}
	var removals map[[2]string]removal
	if journal != nil {
		removals = journal(t)
	}
	var out []chaos.QueueItem
	res := queueResult{}
	completions, gone := 0, 0
	cl.mu.Lock()
	for _, queue := range queues {
		for _, id := range items[queue] {
			k := [2]string{queue, id}
			state, isGone, done := st.item(t, queue, id)
			rm := removals[k]
			by := pr.first[k]
			if !rm.at.IsZero() && (by.IsZero() || rm.at.Before(by)) {
				by = rm.at
			}
			it := chaos.QueueItem{Queue: queue, ID: id, State: state, Gone: isGone, Completions: done,
				Claims: append([]uint64(nil), cl.m[k]...), Calls: append([]chaos.CompletionCall(nil), cl.calls[k]...),
				Removals: rm.n, RemovedIn: rm.states, Listed: pr.listed[k], LostSweeps: pr.lost[queue], RemovedBy: by}
			out = append(out, it)
			completions += len(done)
			if isGone {
				gone++
			}
			if rm.n > 0 {
				res.removed++
			}
			if it.Listed > 0 {
				res.listed++
			}
			res.late += it.LateRefused()
		}
	}
	cl.mu.Unlock()
	res.problems = chaos.CheckQueue(out)
	batched := ""
	if st.batched != nil {
		n := st.batched(t)
		if n == 0 && !o.broken {
			res.problems = append(res.problems, "no two completions committed together: the row did not test batched completions")
		}
		batched = fmt.Sprintf(" (%d in batches)", n)
	}
	res.summary = fmt.Sprintf("%d items, %d completions recorded%s, %d claims, %d stale completions refused, %d cuts",
		len(out), completions, batched, claimCount(cl), cl.stale.Load(), cuts)
	if o.prune {
		lost := 0
		for _, n := range pr.lost {
			lost += n
		}
		res.summary += fmt.Sprintf("; %d items removed (%d gone at the end, %d listed in sweep replies), %d sweeps (%d replies lost), "+
			"%d completions began after their item was removed and were refused; the proxied pruner slowed %d and cut %d times; faults for %v",
			res.removed, gone, res.listed, pr.sweeps.Load(), lost, res.late, slowed, cutPruner, faulted)
		switch {
		case o.broken:
		case res.removed == 0:
			res.problems = append(res.problems, "no item was removed: the row proved nothing about pruning")
		case res.late == 0:
			res.problems = append(res.problems, "no completion began after its item was removed: the row proved nothing about late completions of removed items")
		}
	}
	return res
}

// lateSoFar counts the completion calls so far that began after a sweep
// listed their item as removed and were refused.
func lateSoFar(cl *claims, pr *prunes) int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	n := 0
	for k, calls := range cl.calls {
		at, ok := pr.first[k]
		for _, c := range calls {
			if ok && c.Began.After(at) && !c.Accepted {
				n++
			}
		}
	}
	return n
}

func claimCount(cl *claims) int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	n := 0
	for _, c := range cl.m {
		n += len(c)
	}
	return n
}
