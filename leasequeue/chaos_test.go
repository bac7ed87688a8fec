package leasequeue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golib/lease/internal/testkit/stall"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
)

// history records the claims and completions of every worker of a queue.
type history struct {
	mu        sync.Mutex
	claims    map[string][]*claimRecord // by item, in order
	completed atomic.Int64              // successful completions
}

type claimRecord struct {
	at        time.Time
	worker    string
	token     lease.Token
	completed bool
}

func (h *history) Observe(e leasequeue.Event) {
	i := e.Info()
	h.mu.Lock()
	defer h.mu.Unlock()
	if i.Err != nil {
		return
	}
	switch e.(type) {
	case *leasequeue.Claimed:
		if h.claims == nil {
			h.claims = make(map[string][]*claimRecord)
		}
		h.claims[i.ID] = append(h.claims[i.ID], &claimRecord{at: time.Now(), worker: i.Worker, token: i.Token})
	case *leasequeue.Completed:
		for _, c := range h.claims[i.ID] {
			if c.token == i.Token {
				c.completed = true
			}
		}
		h.completed.Add(1)
	}
}

// chaosWorker is one worker of TestItemsUnderChaos.
type chaosWorker struct {
	name     string
	q        *leasequeue.Queue
	clock    *pauseClock
	done     chan struct{}
	inflight atomic.Int64
	paused   atomic.Bool
	crashed  atomic.Bool
	// doomed makes the worker's handlers wait at dead before they would
	// complete, counted in held: the items it holds when it crashes.
	doomed atomic.Bool
	dead   chan struct{}
	held   atomic.Int64
}

// TestItemsUnderChaos: five workers process 2,000 items while workers
// crash (they stop renewing and writing at once, and are replaced) and
// pause for longer than the TTL (their timers stop, their handlers hang,
// and they carry on afterwards as if nothing happened). Every item is
// completed exactly once, as counted by a write made atomically with its
// fenced completion, and the items of a crashed worker are claimed again
// within about a TTL of the crash.
func TestItemsUnderChaos(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store) {
		const (
			items   = 2000
			workers = 5
			ttl     = time.Second
		)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		src := s.source(t, "chaos")
		ids := make([]string, items)
		for i := range ids {
			ids[i] = fmt.Sprintf("item-%04d", i)
		}
		mustEnqueue(ctx, t, src, ids...)
		p := loadedPolicy(t, ttl)
		var h history
		stalls := stall.Start(t)

		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		start := func(name string) *chaosWorker {
			w := &chaosWorker{name: name, clock: newPauseClock(), done: make(chan struct{}), dead: make(chan struct{})}
			w.q = newQueueOnClock(t, s, src, name, w.clock, leasequeue.Options{
				Name: "chaos", Policy: p, Concurrency: 4, MaxAttempts: 1000, PollEvery: 20 * time.Millisecond,
				RetryDelay: func(int) time.Duration { return 0 }, Observer: &h,
			})
			go func() {
				defer close(w.done)
				_ = w.q.Run(runCtx, func(ctx context.Context, c *leasequeue.Claim) error {
					w.inflight.Add(1)
					defer w.inflight.Add(-1)
					select {
					case <-time.After(time.Duration(1+rand.IntN(5)) * time.Millisecond): // the work
					case <-ctx.Done():
						return ctx.Err()
					}
					<-w.clock.running() // a paused worker hangs here, whatever happens meanwhile
					if w.doomed.Load() {
						w.held.Add(1)
						<-w.dead // about to crash: keep the item held until then
					}
					if w.crashed.Load() {
						return errors.New("crashed") // a dead process writes nothing
					}
					return s.completeWith(context.WithoutCancel(ctx), src, c)
				})
			}()
			return w
		}
		ws := make([]*chaosWorker, workers)
		for i := range ws {
			ws[i] = start(fmt.Sprintf("worker-%d", i))
		}

		// The chaos: every 100–250ms, one worker with items in flight
		// crashes (and a new one takes its place) or pauses for 1.5 TTL;
		// first a crash, then a pause.
		// Right after a crash, the crashed worker's claims are inspected
		// to learn when they expire.
		type expiry struct {
			item, worker string
			crashed, at  time.Time
		}
		var (
			expiries []expiry
			crashes  int
			pauses   sync.WaitGroup
			pausing  atomic.Bool
			npauses  int
		)
		chaosDone := make(chan struct{})
		go func() {
			defer close(chaosDone)
			for h.completed.Load() < items && ctx.Err() == nil {
				// The first crash and the first pause come early: on a
				// quiet machine the items can all be done within a second,
				// and a run without both proves nothing.
				if crashes == 0 || npauses == 0 {
					time.Sleep(time.Duration(30+rand.IntN(50)) * time.Millisecond)
				} else {
					time.Sleep(time.Duration(100+rand.IntN(150)) * time.Millisecond)
				}
				i := rand.IntN(len(ws))
				w := ws[i]
				switch {
				case w.inflight.Load() == 0 || w.paused.Load():
				case crashes > 0 && (npauses == 0 || rand.IntN(2) == 0) && npauses < 5 && !pausing.Load():
					// One pause at a time, so that live workers are left
					// to rescue the items of the paused and crashed ones.
					npauses++
					pausing.Store(true)
					w.paused.Store(true)
					w.clock.pause()
					pauses.Go(func() {
						time.Sleep(ttl * 3 / 2)
						w.clock.resume()
						w.paused.Store(false)
						pausing.Store(false)
					})
				case crashes < 5:
					// Doom the worker first, and crash it once one of its
					// handlers holds an item it would otherwise complete
					// (work takes only milliseconds, so a crash at a random
					// instant often finds nothing held, and the rescue
					// would go unchecked).
					w.doomed.Store(true)
					for wait := time.Now().Add(2 * time.Second); w.held.Load() == 0 && time.Now().Before(wait); {
						time.Sleep(time.Millisecond)
					}
					crashes++
					crashed := time.Now()
					w.crashed.Store(true)
					w.q.Crash()
					close(w.dead) // its handlers see the crash and write nothing
					<-w.done
					ws[i] = start(w.name + "+")
					h.mu.Lock()
					var held []string
					for id, cs := range h.claims {
						if last := cs[len(cs)-1]; last.worker == w.name && !last.completed {
							held = append(held, id)
						}
					}
					h.mu.Unlock()
					for _, id := range held {
						r, err := inspectItem(ctx, src, id)
						if err == nil && r.Held && r.Owner == w.name {
							expiries = append(expiries, expiry{id, w.name, crashed, time.Now().Add(r.Remaining)})
						}
					}
				}
			}
		}()
		eventually(t, 90*time.Second, "every item completed", func() bool { return h.completed.Load() >= items })
		<-chaosDone
		pauses.Wait()
		stop()
		for _, w := range ws {
			<-w.done
		}

		counts, err := s.completions(ctx, src, ids)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if counts[id] != 1 {
				t.Errorf("%s completed %d times, want exactly once", id, counts[id])
			}
			if it := mustItem(ctx, t, src, id); it.State != leasequeue.Done {
				t.Errorf("%s: %+v; want done", id, it)
			}
		}

		// The items a crashed worker held: how long after their leases
		// expired another worker claimed them, less the time this process
		// was stalled meanwhile.
		var worst, stalled time.Duration
		h.mu.Lock()
		again := 0
		for _, cs := range h.claims {
			if len(cs) > 1 {
				again++
			}
		}
		for _, e := range expiries {
			cs := h.claims[e.item]
			var next time.Time
			for _, c := range cs {
				if c.worker != e.worker && c.at.After(e.crashed) {
					next = c.at
					break
				}
			}
			if next.IsZero() {
				t.Errorf("item %s of a crashed worker was never claimed after its lease expired", e.item)
				continue
			}
			stall := stalls.Within(e.at, next)
			if wait := next.Sub(e.at) - stall; wait > worst {
				worst, stalled = wait, stall
			}
		}
		h.mu.Unlock()
		t.Logf("%d crashes, %d pauses; %d items claimed more than once; %d items held by crashed workers, claimed again at worst %v after their lease expired (TTL %v; not counting %v the process was stalled)",
			crashes, npauses, again, len(expiries), worst.Round(time.Millisecond), ttl, stalled.Round(time.Millisecond))
		if crashes == 0 || npauses == 0 || len(expiries) == 0 {
			t.Error("no crash left an item held, or no worker paused: the test proved nothing about rescue")
		}
		if worst > ttl {
			t.Errorf("an item of a crashed worker waited %v after its lease expired, more than a TTL (%v)", worst, ttl)
		}
	})
}

// inspectItem returns the state of item id's claim on src.
func inspectItem(ctx context.Context, src leasequeue.Source, id string) (lease.Record, error) {
	return src.(leasequeue.Claimer).InspectClaim(ctx, id)
}
