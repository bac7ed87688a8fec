package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
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
	"github.com/golib/lease/internal/chaos"
	"github.com/golib/lease/internal/testserver"
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
	// enqueue adds the items, item reads an item's state and the tokens
	// its completions recorded; both go to the server directly.
	enqueue func(t *testing.T, queue string, ids []string)
	item    func(t *testing.T, queue, id string) (string, []uint64)
	// batched, if set, counts the completions that committed in one
	// transaction with others.
	batched func(t *testing.T) int
}

// align is the period of the clock on whose ticks the store's workers
// complete (see queueStore.workers), or 0.
func (st queueStore) align() time.Duration {
	if st.workers > 1 {
		return 250 * time.Millisecond
	}
	return 0
}

func valkeyQueueStore(t *testing.T) queueStore {
	addr := testserver.Valkey(t).Addr()
	prefix := valkeyTarget(addr).Prefix
	source := func(c valkey.Client, queue string) *leasequeue.ValkeySource {
		s, err := leasequeue.NewValkeySource(c, queue, leasequeue.ValkeyOptions{Prefix: prefix + "q:"})
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
					return src.CompleteClaimWith(ctx, cl, fence.XAdd(src.ItemKey(cl.ID(), "effects"), fence.XAddOptions{},
						"token", strconv.FormatUint(uint64(cl.Snapshot().Token), 10)))
				}}
		},
		enqueue: func(t *testing.T, queue string, ids []string) {
			if _, err := source(direct, queue).Enqueue(ctxT(t), ids...); err != nil {
				t.Fatal(err)
			}
		},
		item: func(t *testing.T, queue, id string) (string, []uint64) {
			src := source(direct, queue)
			it, err := src.Item(ctxT(t), id)
			if err != nil {
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
			return string(it.State), tokens
		},
	}
}

func postgresQueueStore(t *testing.T) queueStore { return postgresQueue(t, false) }

// postgresBatchedQueueStore is the PostgreSQL source with four workers
// per side completing with Claim.Complete, whose overlapping completions
// the source sends in batches. The completions are recorded by a trigger
// in the statement that marks an item done, whichever statement it is.
func postgresBatchedQueueStore(t *testing.T) queueStore { return postgresQueue(t, true) }

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

func postgresQueue(t *testing.T, batched bool) queueStore {
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
	name, workers := "postgres", 1
	if batched {
		if _, err := direct.Exec(ctx, doneTrigger); err != nil {
			t.Fatal(err)
		}
		name, workers = "postgres-batched", 4
	}
	source := func(db leasequeue.PostgresDB, queue string) *leasequeue.PostgresSource {
		s, err := leasequeue.NewPostgresSource(db, queue, leasequeue.PostgresOptions{})
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
		item: func(t *testing.T, queue, id string) (string, []uint64) {
			it, err := source(direct, queue).Item(ctxT(t), id)
			if err != nil {
				t.Fatalf("item %q of %q: %v", id, queue, err)
			}
			return string(it.State), effects(t, direct, queue, id)
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

// claims collects the tokens of the claims that began an attempt.
type claims struct {
	mu    sync.Mutex
	m     map[[2]string][]uint64
	stale atomic.Int64 // completions the fence refused
}

func (c *claims) add(queue, id string, tok lease.Token) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[[2]string{queue, id}] = append(c.m[[2]string{queue, id}], uint64(tok))
}

// work claims ready items of side's queue and completes each after a
// while (one to two TTLs if paused; then on the next tick of a clock of
// period align, if align is not 0), without watching the claim's
// context, as a handler that is slow to notice its loss does, until ctx
// ends.
func work(ctx context.Context, side queueSide, queue string, cl *claims, seed uint64, align time.Duration, paused bool) {
	rng := rand.New(rand.NewPCG(seed, 0x9))
	timeout := 2 * rowPolicyOptions.OperationTimeout
	for ctx.Err() == nil {
		nctx, cancel := context.WithTimeout(ctx, timeout)
		ids, err := side.src.Next(nctx, 1, ttl)
		cancel()
		if err != nil || len(ids) == 0 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		c, err := side.q.Claim(ctx, ids[0])
		if err != nil {
			continue
		}
		cl.add(queue, c.ID(), c.Snapshot().Token)
		if paused {
			time.Sleep(ttl + time.Duration(rng.Int64N(int64(ttl))))
		} else {
			time.Sleep(time.Duration(rng.Int64N(int64(ttl / 2))))
		}
		if align > 0 {
			time.Sleep(time.Until(time.Now().Truncate(align).Add(align)))
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		if err := side.complete(cctx, c); errors.Is(err, fence.ErrStale) {
			cl.stale.Add(1)
		}
		cancel()
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
	for _, open := range []func(*testing.T) queueStore{valkeyQueueStore, postgresQueueStore, postgresBatchedQueueStore} {
		st := open(t)
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			queueExactlyOnce(t, st)
		})
	}
}

func queueExactlyOnce(t *testing.T, st queueStore) {
	n := max(6, 3*int(rowDuration(t)/time.Second)) * min(2, max(1, st.workers)) // enough work for the whole row
	items := queueItems(n)
	for queue, ids := range items {
		st.enqueue(t, queue, ids)
	}
	cl := &claims{m: map[[2]string][]uint64{}}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg      sync.WaitGroup
		proxies []*chaos.Proxy
		sides   []queueSide
	)
	i := 0
	for _, queue := range []string{"orders", "orders/eu"} {
		for k := range 2 {
			p := newProxy(t, st.upstream)
			paused := st.workers > 1 && k == 0
			var clock lease.Clock
			if paused {
				clock = leasetest.NewFakeClock(time.Now())
			}
			side := st.open(t, p.Addr(), queue, fmt.Sprintf("chaos-q%d", i), clock)
			proxies, sides = append(proxies, p), append(sides, side)
			for range max(1, st.workers) {
				wg.Add(1)
				go func(seed uint64) {
					defer wg.Done()
					work(ctx, side, queue, cl, seed, st.align(), paused)
				}(uint64(i + 1))
				i++
			}
		}
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x9))
	until := time.Now().Add(rowDuration(t))
	cuts := 0
	for time.Now().Before(until) {
		time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(700*time.Millisecond))))
		p := proxies[rng.IntN(len(proxies))]
		if st.workers > 1 && cuts%2 == 1 {
			// Late instead of lost: what the side sends arrives after
			// its claims expired and others took the items over.
			lat := ttl.Milliseconds() * 3 / 4
			toxic(t, p, chaos.Both("latency", map[string]any{"latency": lat, "jitter": lat / 10})...)
		} else {
			toxic(t, p, chaos.Both("timeout", map[string]any{"timeout": 0})...)
		}
		time.Sleep(3*ttl/2 + time.Duration(rng.Int64N(int64(ttl))))
		heal(t, p)
		cuts++
	}
	cancel()
	wg.Wait()
	for _, s := range sides {
		s.close()
	}
	// Drain: as many workers per queue as a side has, straight to the
	// server, until every item is done or a generous while has passed.
	dctx, dcancel := context.WithCancel(context.Background())
	for j, queue := range []string{"orders", "orders/eu"} {
		side := st.open(t, st.upstream, queue, fmt.Sprintf("chaos-drain%d", j), nil)
		defer side.close()
		for k := range max(1, st.workers) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				work(dctx, side, queue, cl, uint64(100+10*j+k), 0, false)
			}()
		}
	}
	deadline := time.Now().Add(30 * ttl)
	var out []chaos.QueueItem
	for {
		out = out[:0]
		pending := 0
		for queue, ids := range items {
			for _, id := range ids {
				state, done := st.item(t, queue, id)
				if state != string(leasequeue.Done) {
					pending++
				}
				cl.mu.Lock()
				out = append(out, chaos.QueueItem{Queue: queue, ID: id, State: state, Completions: done,
					Claims: append([]uint64(nil), cl.m[[2]string{queue, id}]...)})
				cl.mu.Unlock()
			}
		}
		if pending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(ttl / 2)
	}
	dcancel()
	wg.Wait()
	problems := chaos.CheckQueue(out)
	completions := 0
	for _, it := range out {
		completions += len(it.Completions)
	}
	batched := ""
	if st.batched != nil {
		n := st.batched(t)
		if n == 0 {
			t.Errorf("no two completions committed together: the row did not test batched completions")
		}
		batched = fmt.Sprintf(" (%d in batches)", n)
	}
	t.Logf("chaos-summary %s: %d items, %d completions recorded%s, %d claims, %d stale completions refused, %d cuts (ran %v)",
		t.Name(), len(out), completions, batched, claimCount(cl), cl.stale.Load(), cuts, rowDuration(t))
	for _, p := range problems {
		t.Error(p)
	}
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
