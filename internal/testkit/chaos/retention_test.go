package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// retention is the lease stores' retention in the retention rows: far
// below the TTL, so that records of ended leases are swept while their
// keys are still in use, between one holder and the next.
const retention = 100 * time.Millisecond

// retentionKeys are the keys of the retention rows: more than the four
// clients use at once, so that some lie idle past the retention.
var retentionKeys = []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"}

// TestRetentionSweeps runs the clients on stores that keep the record of
// an ended lease for only 100ms, while two sweepers walk the records
// without pause: one on a connection of its own, one through a proxy that
// the nemesis cuts off or slows down past the TTL (so that its scripts and
// statements arrive late, after the records changed). The nemesis also
// stops the child process (SIGSTOP) while it holds a lease, for longer
// than the TTL and the retention, so that its record is swept under it
// before it continues with its old token.
//
// The history gets no data-loss mark for any of it: a sweep removes only
// records of leases that ended a retention ago, so the model's rules hold
// as they are. No token may be issued twice or go down, no two
// acquisitions may be valid at once, a continued holder's renewals must
// fail and its writes be fenced out.
func TestRetentionSweeps(t *testing.T) {
	t.Parallel()
	retentionRows(t, false)
}

// TestRetentionCatchesBrokenSweeper runs the row of TestRetentionSweeps
// with a sweeper that removes every record, held or not: the checker must
// refuse the history. It shows that the row can fail.
func TestRetentionCatchesBrokenSweeper(t *testing.T) {
	t.Parallel()
	retentionRows(t, true)
}

// retentionRows runs retentionRow on every network backend, with the
// short retention.
func retentionRows(t *testing.T, broken bool) {
	for i, b := range networkBackends {
		if broken && i > 0 && !long() {
			break // the short form shows the failure on one backend; the long form on all
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			target, p, direct := b.target(t)
			target.Retention = retention
			retentionRow(t, startRun(t, target, rowOptions{keys: retentionKeys}), p, direct, broken)
		})
	}
}

func retentionRow(t *testing.T, r *run, p *chaos.Proxy, direct string, broken bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The proxied sweeper reaches the server through p, the other one
	// directly.
	viaProxy := r.target
	viaDirect := r.target
	if r.target.Kind == "postgres" {
		viaDirect.URL = direct
	} else {
		viaDirect.Addr = testserver.Valkey(t).Addr()
	}
	var swept, gone, retired atomic.Int64
	var wg sync.WaitGroup
	for i, tg := range []chaos.Target{viaDirect, viaProxy} {
		b, _, closeFn, err := tg.Open(ctx, fmt.Sprintf("chaos-sweeper-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		defer closeFn()
		s, ok := b.(lease.Sweeper)
		if !ok {
			t.Fatalf("%T is not a lease.Sweeper", b)
		}
		if broken {
			s = brokenSweeper(t, tg)
		}
		if !broken {
			// The fences retire too, with the same retention.
			f := fenceSweeper(t, tg)
			wg.Add(1)
			go func() {
				defer wg.Done()
				sweepLoop(ctx, f, &retired)
			}()
		}
		if i == 0 {
			// Count the records that vanished, by a sweep or, on Valkey,
			// by the TTL a release gave them.
			wg.Add(1)
			go func() {
				defer wg.Done()
				watchGone(ctx, b, &gone)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sweepLoop(ctx, s, &swept)
		}()
	}
	if broken {
		for r.running() {
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		wg.Wait()
		if err := r.child.Stop(30 * time.Second); err != nil {
			t.Error(err)
		}
		r.childDone = true
		if err := r.h.Stop(); err != nil {
			t.Error(err)
		}
		res := chaos.Check(r.rec.Ops(), chaos.CheckOptions{Name: t.Name(), NoFiles: true,
			ModelOptions: chaos.ModelOptions{ClockTokens: true}})
		if res.OK() {
			t.Fatalf("a sweeper that removes held leases' records (%d removed) went unnoticed: %v", swept.Load(), res)
		}
		t.Logf("the broken sweeper removed %d records; the checker refuses the history, as it should:\n%v", swept.Load(), res.Problems[0])
		return
	}
	h := newHoldings(r.rec)
	pauses, slowed, cut := 0, 0, 0
	for r.running() {
		r.pause(100*time.Millisecond, 400*time.Millisecond)
		switch r.rng.IntN(3) {
		case 0:
			what := "the child"
			if g, ok := h.any(); ok {
				what = fmt.Sprintf("the child holding %s/%d", g.Key, g.Token)
			}
			r.h.Fault("SIGSTOP "+what+" past its TTL and the retention", false, func() {
				if err := r.child.Pause(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(ttl + 3*retention + time.Duration(r.rng.Int64N(int64(ttl))))
				_ = r.child.Resume()
			})
			pauses++
		case 1:
			toxic(t, p, chaos.Both("latency", map[string]any{"latency": int(3 * ttl / 2 / time.Millisecond)})...)
			r.pause(ttl, 2*ttl)
			heal(t, p)
			slowed++
		case 2:
			if err := p.Cut(); err != nil {
				t.Fatal(err)
			}
			r.pause(ttl/2, ttl)
			heal(t, p)
			cut++
		}
	}
	cancel()
	wg.Wait()
	res := r.finish(rowOptions{})
	late := count(r.rec.Ops(), func(op chaos.Op) bool { return op.Late })
	t.Logf("%d records swept, %d seen gone, %d fences retired; %d child pauses (%d late writes), the proxied sweeper slowed %d and cut %d times; %d operations checked",
		swept.Load(), gone.Load(), retired.Load(), pauses, late, slowed, cut, res.Checked)
	if gone.Load() == 0 {
		t.Error("no record was seen gone: the row proved nothing")
	}
	if retired.Load() == 0 {
		t.Error("no fence was retired: the row proved nothing about floors")
	}
}

// watchGone inspects the run's keys until ctx ends, counting each time a
// key's record is found gone after it was seen.
func watchGone(ctx context.Context, b lease.Backend, gone *atomic.Int64) {
	seen := map[string]bool{}
	for ctx.Err() == nil {
		for _, k := range retentionKeys {
			rec, err := b.Inspect(ctx, k)
			if err != nil {
				continue
			}
			if rec.Token == 0 && seen[k] {
				gone.Add(1)
			}
			seen[k] = rec.Token != 0
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sweepLoop sweeps s from end to end until ctx ends, counting removals.
func sweepLoop(ctx context.Context, s lease.Sweeper, swept *atomic.Int64) {
	cursor := ""
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, 2*ttl)
		page, err := s.Sweep(octx, lease.SweepOptions{Cursor: cursor, Limit: 2})
		cancel()
		if err != nil {
			cursor = ""
			time.Sleep(10 * time.Millisecond)
			continue
		}
		swept.Add(int64(len(page.Removed)))
		cursor = page.Next
		if cursor == "" {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// fenceSweeper returns the sweeper that retires the fences of tg's
// resources with the row's retention.
func fenceSweeper(t *testing.T, tg chaos.Target) lease.Sweeper {
	if tg.Kind == "postgres" {
		pool, err := chaos.Pool(ctxT(t), tg.URL, "chaos-fence-sweeper", 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		tbl, err := fencepostgres.NewTable(fencepostgres.TableOptions{Retention: retention})
		if err != nil {
			t.Fatal(err)
		}
		return tbl.Sweeper(pool)
	}
	c, err := tg.ValkeyClient(tg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f, err := fencevalkey.New(c, fencevalkey.Options{Prefix: tg.Prefix + "fence:", Retention: retention})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// brokenSweeper returns a sweeper of tg's lease records that removes
// every record, held or not.
func brokenSweeper(t *testing.T, tg chaos.Target) lease.Sweeper {
	if tg.Kind == "postgres" {
		u, err := url.Parse(tg.URL)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := pgx.Connect(ctxT(t), u.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		var mu sync.Mutex
		return sweepFunc(func(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
			mu.Lock()
			defer mu.Unlock()
			rows, err := conn.Query(ctx, "DELETE FROM public.leases RETURNING key")
			if err != nil {
				return lease.SweepPage{}, err
			}
			keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
			return lease.SweepPage{Removed: keys}, err
		})
	}
	c, err := tg.ValkeyClient(tg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return sweepFunc(func(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
		var page lease.SweepPage
		for _, k := range retentionKeys {
			rec := tg.Prefix + "lease:{" + k + "}"
			n, err := c.Do(ctx, c.B().Del().Key(rec).Build()).AsInt64()
			if err != nil && !errors.Is(err, valkey.Nil) {
				return page, err
			}
			if n > 0 {
				page.Removed = append(page.Removed, k)
			}
		}
		return page, nil
	})
}

type sweepFunc func(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error)

func (f sweepFunc) Sweep(ctx context.Context, o lease.SweepOptions) (lease.SweepPage, error) {
	return f(ctx, o)
}
