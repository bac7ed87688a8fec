package postgres_test

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/lease"
)

// TestSweepContentionFigures measures what a sweep costs hot
// acquisitions: acquire→release loops on a few hot keys, alone and beside
// a sweep loop over 100,000 ended rows (once deleting them, once walking
// rows still in their retention). It logs operations per second and
// asserts nothing about them. It runs only with LEASE_SWEEP_FIGURES=1:
//
//	LEASE_SWEEP_FIGURES=1 go test -count=1 -v -run TestSweepContentionFigures ./backends/postgres/
func TestSweepContentionFigures(t *testing.T) {
	if os.Getenv("LEASE_SWEEP_FIGURES") == "" {
		t.Skip("set LEASE_SWEEP_FIGURES=1 to measure")
	}
	const (
		hotKeys = 16
		workers = 4
		ended   = 100_000
		window  = 5 * time.Second
	)
	pool := newPool(t, newDatabase(t), func(c *pgxpool.Config) { c.MaxConns = workers + 2 })
	s := newStore(t, pool, leasepostgres.Options{Retention: time.Hour})
	ctx := ctxT(t)
	fill := func(endedAgo string) {
		t.Helper()
		if _, err := pool.Exec(ctx, "TRUNCATE public.leases"); err != nil {
			t.Fatal(err)
		}
		_, err := pool.Exec(ctx, `INSERT INTO public.leases (key, owner, nonce, token, expires_at)
SELECT format('ended/%s', lpad(i::text, 6, '0')), 'o', 'n', 1, statement_timestamp() - $2::interval
FROM generate_series(1, $1::int) AS i`, ended, endedAgo)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE public.leases"); err != nil {
			t.Fatal(err)
		}
	}
	// hot runs the acquire→release loops until stop and returns their
	// operations per second and the 50th and 99th percentiles of one
	// acquire→release.
	hot := func(stop <-chan struct{}) (perSec float64, p50, p99 time.Duration) {
		var (
			ops       atomic.Int64
			wg        sync.WaitGroup
			mu        sync.Mutex
			latencies []time.Duration
		)
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				var mine []time.Duration
				defer func() {
					mu.Lock()
					latencies = append(latencies, mine...)
					mu.Unlock()
				}()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					began := time.Now()
					key := fmt.Sprintf("hot/%d", (w+n*workers)%hotKeys)
					a := lease.Acquisition{Key: key, Owner: "o", Nonce: fmt.Sprintf("%d-%d", w, n)}
					tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute})
					if err != nil {
						continue // held by another worker
					}
					a.Token = tok
					if err := s.Release(ctx, a); err != nil {
						t.Error(err)
						return
					}
					mine = append(mine, time.Since(began))
					ops.Add(1)
				}
			})
		}
		wg.Wait()
		slices.Sort(latencies)
		if len(latencies) == 0 {
			return 0, 0, 0
		}
		return float64(ops.Load()) / time.Since(start).Seconds(), latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	}
	// sweeping walks the table again and again until stop, or until a
	// walk removed nothing if untilEmpty, and returns the pages and rows.
	sweeping := func(stop chan struct{}, untilEmpty bool) (pages, removed int) {
		for {
			cursor, walked := "", 0
			for {
				p, err := s.Sweep(ctx, lease.SweepOptions{Cursor: cursor, Limit: 1000})
				if err != nil {
					t.Error(err)
					return
				}
				pages++
				walked += len(p.Removed)
				if p.Next == "" {
					break
				}
				cursor = p.Next
				select {
				case <-stop:
					return pages, removed + walked
				default:
				}
			}
			removed += walked
			if untilEmpty && walked == 0 {
				return
			}
		}
	}
	alone := func(name string) {
		stop := make(chan struct{})
		time.AfterFunc(window, func() { close(stop) })
		perSec, p50, p99 := hot(stop)
		t.Logf("%-38s %6.0f acquire+release/s, p50 %v, p99 %v", name, perSec, p50.Round(time.Microsecond), p99.Round(time.Microsecond))
	}
	beside := func(name, endedAgo string, untilEmpty bool) {
		fill(endedAgo)
		stop := make(chan struct{})
		var (
			pages, removed int
			took           time.Duration
		)
		done := make(chan struct{})
		go func() {
			defer close(done)
			start := time.Now()
			pages, removed = sweeping(stop, untilEmpty)
			took = time.Since(start)
		}()
		var (
			perSec   float64
			p50, p99 time.Duration
		)
		if untilEmpty {
			// Measure while the sweep deletes, then stop the loops.
			hotStop := make(chan struct{})
			go func() { <-done; close(hotStop) }()
			perSec, p50, p99 = hot(hotStop)
		} else {
			time.AfterFunc(window, func() { close(stop) })
			perSec, p50, p99 = hot(stop)
			<-done
		}
		t.Logf("%-38s %6.0f acquire+release/s, p50 %v, p99 %v (sweep: %d pages, %d rows removed in %v)",
			name, perSec, p50.Round(time.Microsecond), p99.Round(time.Microsecond), pages, removed, took.Round(time.Millisecond))
	}

	fill("2 hours")
	alone("alone, 100k ended rows in the table")
	beside("beside a sweep deleting 100k rows", "2 hours", true)
	alone("alone, after that sweep")
	beside("beside sweeps walking 100k kept rows", "10 minutes", false)
	alone("alone, 100k ended rows in the table")
}
