package cache

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/golib/lease/lease"
)

// A flight is one refresh of one key in this process: taking the refresh
// lease and loading, or waiting for another process's publication. Every
// Get of the key that misses while the flight runs joins it, so a process
// has at most one refresh lease attempt, one load and one subscription per
// key at a time.
//
// A value that a flight read or published at some instant may only be
// handed to the Gets that joined before that instant: a Get that joined
// later made its own read later, found nothing, and may be looking for a
// value written after an invalidation. So before sending a request whose
// answer it may deliver, the flight bumps seq; a Get takes the result only
// if it joined at a lower seq, and looks again otherwise.
type flight struct {
	key    string
	done   chan struct{} // closed when res is set
	res    result
	cancel context.CancelFunc

	// guarded by Cache.mu
	seq  uint64
	refs int
}

// A ticket is a Get's place in a flight.
type ticket struct {
	seq     uint64 // the flight's seq when the Get joined
	creator bool   // the Get started the flight; its load function runs
}

// result is how a flight ended.
type result struct {
	val  []byte
	info Info
	err  error
	seq  uint64 // the flight's seq when it sent the request that produced val
	// elsewhere means another process holds the refresh lease and the
	// flight, started by a Get with a stale value to return, did not wait.
	elsewhere bool
}

// join adds a Get of k to the key's flight, starting one if none runs.
// A Get with a stale value in hand joins no running flight: join returns
// nil, and the Get returns its stale value.
func (c *Cache) join(ctx context.Context, k keys, load LoadFunc, hasStale bool) (*flight, ticket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.flights[k.key]; f != nil {
		if hasStale {
			return nil, ticket{}
		}
		f.refs++
		return f, ticket{seq: f.seq}
	}
	// The flight outlives the Get that starts it if others wait for it; it
	// keeps the context's values but ends when the last Get gives up.
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &flight{key: k.key, done: make(chan struct{}), cancel: cancel, refs: 1}
	if c.flights == nil {
		c.flights = make(map[string]*flight)
	}
	c.flights[k.key] = f
	go c.run(fctx, f, k, load, hasStale)
	return f, ticket{creator: true}
}

// await waits for f's result, or for ctx to end. A Get that gives up
// leaves the flight; the last one to leave cancels it.
func (c *Cache) await(ctx context.Context, f *flight) (result, error) {
	select {
	case <-f.done:
		return f.res, nil
	case <-ctx.Done():
	}
	c.mu.Lock()
	f.refs--
	if f.refs == 0 {
		f.cancel()
		if c.flights[f.key] == f {
			delete(c.flights, f.key) // later Gets start afresh
		}
	}
	c.mu.Unlock()
	return result{}, context.Cause(ctx)
}

// seal marks the moment f sends a request whose answer it may deliver,
// and returns the mark for the result.
func (c *Cache) seal(f *flight) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	f.seq++
	return f.seq
}

// run runs the flight f and publishes its result to the Gets in it.
func (c *Cache) run(ctx context.Context, f *flight, k keys, load LoadFunc, staleMode bool) {
	returned := false
	defer func() {
		if !returned {
			f.res = result{err: fmt.Errorf("load %q called runtime.Goexit", k.key)}
		}
		c.mu.Lock()
		if c.flights[k.key] == f {
			delete(c.flights, k.key)
		}
		c.mu.Unlock()
		f.cancel()
		close(f.done)
	}()
	f.res = c.refresh(ctx, f, k, load, staleMode)
	returned = true
}

// refresh takes k's refresh lease and loads, or waits for the process that
// holds it to publish, until a value is there, an error ends it, or, in
// staleMode, it finds the lease held.
func (c *Cache) refresh(ctx context.Context, f *flight, k keys, load LoadFunc, staleMode bool) result {
	var (
		w       *wakeups
		waitEnd <-chan time.Time
		reloads int
	)
	defer func() {
		if w != nil {
			w.stop()
		}
	}()
	for {
		h, err := c.leases.TryAcquire(ctx, k.lease, c.policy)
		var held *lease.NotAcquiredError
		switch {
		case err == nil:
			r := c.loadAndPublish(ctx, f, k, h, load)
			if errors.Is(r.err, ErrInvalidated) && reloads < maxReloads {
				// The source changed while loading: load it again, under a
				// new acquisition that the invalidation does not cover.
				reloads++
				continue
			}
			return r
		case !errors.As(err, &held):
			return result{err: err}
		case staleMode:
			return result{elsewhere: true}
		}
		if w == nil {
			// Subscribe, then look again: a publication made before the
			// subscription would otherwise go unnoticed.
			if w, err = c.watch(ctx, k); err != nil {
				return result{err: err}
			}
			t := time.NewTimer(c.wait)
			defer t.Stop()
			waitEnd = t.C
		} else {
			// Try the lease again when the holder's time is up, in case it
			// died without releasing; a renewing holder sends us back here.
			retry := held.Remaining + time.Millisecond
			if held.Remaining <= 0 {
				retry = c.policy.Options().Retry
			}
			t := time.NewTimer(retry)
			select {
			case <-w.published:
			case <-w.released:
				t.Stop()
				continue
			case <-t.C:
				continue
			case <-waitEnd:
				t.Stop()
				return result{err: fmt.Errorf("%w after %v; %q holds the refresh lease (token %d)", ErrWaitTimeout, c.wait, held.Holder, held.Token)}
			case <-ctx.Done():
				t.Stop()
				return result{err: context.Cause(ctx)}
			}
			t.Stop()
		}
		s := c.seal(f)
		e, err := c.read(ctx, k.fresh, k.value)
		if err != nil {
			return result{err: err}
		}
		if e.fresh {
			return result{val: e.val, info: Info{Outcome: Shared, Token: e.token}, seq: s}
		}
	}
}

// loadAndPublish runs load under the refresh lease h and publishes its
// value, guarded by h; it releases h before it returns.
func (c *Cache) loadAndPublish(ctx context.Context, f *flight, k keys, h *lease.Handle, load LoadFunc) result {
	// If the release fails, the lease ends after LeaseTTL anyway.
	defer h.Release(context.WithoutCancel(ctx))

	// Another process may have published between the read that sent the
	// Get here and this acquisition.
	s := c.seal(f)
	e, err := c.read(ctx, k.fresh, k.value)
	if err != nil {
		return result{err: err}
	}
	if e.fresh {
		return result{val: e.val, info: Info{Outcome: Shared, Token: e.token}, seq: s}
	}

	start := time.Now()
	failed := func(err error) result {
		c.observe(func() Event {
			return &RefreshFailed{EventInfo: EventInfo{Key: k.key, Token: h.Token(), Latency: time.Since(start), Err: err}}
		})
		return result{err: err}
	}
	m, err := h.StartManaged(ctx)
	if err != nil {
		return failed(err)
	}
	val, err := callLoad(m.Context(), k.key, h.Token(), load)
	if lost := m.Stop(context.WithoutCancel(ctx)); err == nil && lost != nil {
		err = lost
	}
	if err != nil {
		return failed(wrapOp("load", k.key, err))
	}
	g, err := c.store.Guard(h.Snapshot())
	if err != nil {
		return failed(err)
	}
	s = c.seal(f)
	if err := c.publish(ctx, g, k, val, c.ttl); err != nil {
		return failed(err)
	}
	c.observe(func() Event {
		return &Refreshed{EventInfo: EventInfo{Key: k.key, Token: h.Token(), Latency: time.Since(start)}}
	})
	return result{val: val, info: Info{Outcome: Loaded, Token: h.Token()}, seq: s}
}

// callLoad calls load, turning a panic into a *PanicError.
func callLoad(ctx context.Context, key string, token lease.Token, load LoadFunc) (val []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			val, err = nil, &PanicError{Key: key, Value: v, Stack: debug.Stack()}
		}
	}()
	return load(ctx, token)
}

// wakeups are what a flight waiting for another process's refresh
// listens to.
type wakeups struct {
	published <-chan struct{} // a value was published
	released  <-chan struct{} // the refresh lease was released
	stops     []func()
}

func (w *wakeups) stop() {
	for _, stop := range w.stops {
		stop()
	}
}

// watch subscribes to k's publications and to releases of its refresh
// lease.
func (c *Cache) watch(ctx context.Context, k keys) (*wakeups, error) {
	pub, stopPub, err := subscribe(ctx, c.client, k.channel)
	if err != nil {
		return nil, fmt.Errorf("subscribe to publications: %w", err)
	}
	rel, stopRel, err := c.store.WatchReleases(ctx, k.lease)
	if err != nil {
		stopPub()
		return nil, err
	}
	return &wakeups{published: pub, released: rel, stops: []func(){stopPub, stopRel}}, nil
}
