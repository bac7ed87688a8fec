package lease

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"
)

// ClientOptions configure a Client. Only Owner is required.
type ClientOptions struct {
	// Owner names this client to other holders and in observations, for
	// example "billing-worker/" + hostname. It must pass ValidateOwner.
	// Two clients with the same owner string still cannot renew or release
	// each other's leases: every acquisition carries its own random secret.
	Owner string

	// Clock tells time for local deadlines, retry pauses and renewal
	// cadence. Default SystemClock().
	Clock Clock

	// Observer receives an event for every state change. Default
	// NopObserver.
	Observer Observer

	// SweepEvery is how often, at most, the client removes the records
	// that outlived their retention: those of its backend, if the backend
	// is a Sweeper, and those of Sweepers. The client does it in the
	// background, with Sweep, under the lease SweepKey (so one replica
	// sweeps at a time), triggered by its own acquisitions and releases:
	// the first sweep comes between one half and one SweepEvery after the
	// client's first use, then about every SweepEvery while it is used. A
	// background sweep's errors are dropped (its acquire and release of
	// SweepKey are observed as any other); call Sweep to see them.
	// Default DefaultSweepEvery; negative never sweeps in the background.
	SweepEvery time.Duration

	// Preferred makes this client's Acquire calls (of single keys) ask to
	// be preferred: an attempt that finds the key held records the client
	// as the key's preferred candidate (Record.Preferred), so that a
	// holder that watches for it (leaseservice does) hands the key over at
	// its next safe point. Nothing takes the key from its holder. Needs a
	// HandOffer backend; others ignore it. Default false.
	Preferred bool

	// Sweepers are swept with the backend: the fence tables and queue
	// sources whose records this client's leases protect. Default none.
	Sweepers []Sweeper
}

// A Client acquires leases from a Backend on behalf of one owner. It is
// safe for concurrent use; one Client per process and backend is typical.
type Client struct {
	b     Backend
	owner string
	clock Clock
	obs   Observer
	quiet bool // obs is NopObserver: build no events
	// preferred: ClientOptions.Preferred
	preferred bool
	// sysClock: clock is SystemClock, whose timers need no goroutine to
	// wait on them (see StartManaged).
	sysClock bool
	// sweep schedules background sweeps of the backend and extra.
	sweep sweeping
	extra []Sweeper
}

// NewClient returns a Client that acquires leases from b. It fails if b is
// nil or o.Owner is invalid (the error then matches ErrInvalidOwner). The
// client never closes b.
func NewClient(b Backend, o ClientOptions) (*Client, error) {
	if b == nil {
		return nil, errors.New("lease: NewClient: nil Backend")
	}
	if err := ValidateOwner(o.Owner); err != nil {
		return nil, wrapOp("NewClient", "", err)
	}
	c := &Client{b: b, owner: o.Owner, clock: o.Clock, obs: o.Observer, preferred: o.Preferred}
	if c.clock == nil {
		c.clock = SystemClock()
	}
	if c.obs == nil {
		c.obs = NopObserver
	}
	c.quiet = c.obs == NopObserver
	_, c.sysClock = c.clock.(systemClock)
	for i, s := range o.Sweepers {
		if s == nil {
			return nil, fmt.Errorf("lease: NewClient: nil Sweepers[%d]", i)
		}
	}
	c.extra = append([]Sweeper(nil), o.Sweepers...)
	c.sweep.start(o.SweepEvery, len(c.sweepers()) > 0)
	return c, nil
}

// Owner returns the client's owner string.
func (c *Client) Owner() string { return c.owner }

// Preferred reports whether the client's acquisitions ask to be preferred
// (ClientOptions.Preferred), so that a package that builds its own Client
// from this one (leaseservice does) can keep the setting.
func (c *Client) Preferred() bool { return c.preferred }

// Clock returns the clock the client measures deadlines on, so that code
// built on the client can compare a Handle's Deadline with the same clock.
func (c *Client) Clock() Clock { return c.clock }

// Backend returns the backend the client was built with.
func (c *Client) Backend() Backend { return c.b }

// Observer returns the observer the client reports to (NopObserver if
// ClientOptions.Observer was nil), so that code built on the client can
// make a client of the same owner, clock and observer over a wrapped
// backend.
func (c *Client) Observer() Observer { return c.obs }

// Acquire acquires the lease on key, waiting for it as sync.Mutex.Lock and
// semaphore.Acquire do: while the lease is held by someone else, on a
// backend that reports releases (lease.ReleaseWatcher) it sleeps until the
// key is released or the holder's remaining time runs out, and at least
// p's Poll once it saw the holder renew; on a backend that does not, it
// asks again every p's Retry (jittered), and no later than the holder's
// expiry. After a backend error, or when the backend does not say how
// long the holder keeps the key, it tries again every p's Retry. It keeps
// trying until it gets the lease or ctx ends. p's Wait (if positive) and
// MaxAttempts (if positive) bound the waiting further, whichever ends
// first. Each attempt is bounded by p's OperationTimeout. Use TryAcquire
// for a single attempt that never waits.
//
// Acquire waits by default because that is what every lock a Go program
// knows does; a caller who wants to give up must say when, with ctx, Wait
// or MaxAttempts, rather than find out in production that the zero Wait
// meant one attempt.
//
// On success the returned Handle holds the lease with a fresh token; its
// local deadline is TTL − SafetyMargin after the successful request was
// sent. Start managed renewal with Handle.StartManaged, or renew by hand.
//
// On failure the error names the operation and key, and matches:
//
//   - ErrNotAcquired (errors.As finds a *NotAcquiredError naming the
//     holder) when Wait or MaxAttempts ran out with the lease held by
//     someone else;
//   - the context's cause when ctx ended (its text also says what the
//     last attempt found), never ErrNotAcquired;
//   - ErrIndeterminate when any attempt went unanswered (see below);
//   - ErrMisconfigured, at once, when the backend refused an attempt for a
//     reason no retry can cure (a missing table or privilege, a wrong
//     password: see ErrMisconfigured): Acquire does not wait then, and
//     returns the error TryAcquire would;
//   - otherwise the last backend error.
//
// ErrIndeterminate comes on top of the others: a wait that ran out with the
// key held, after an attempt went unanswered, matches both ErrNotAcquired
// and ErrIndeterminate.
//
// # Unanswered attempts
//
// Attempts reuse one acquisition secret, so an attempt whose outcome was
// unknown is resolved by the next one. If Acquire gives up after an
// attempt went unanswered, it first releases whatever such an attempt may
// have granted (under a context detached from ctx, bounded by
// OperationTimeout), but the error still matches ErrIndeterminate, whatever
// that release answers: an answer to the release proves nothing about an
// attempt that may still be on its way or stalled in the backend, which
// can be applied after the release and then hold the key, by nobody, until
// its TTL passes. An error that does not match ErrIndeterminate means that
// no grant exists, and none can still appear, for this call. The same can
// happen after Acquire succeeded following an unanswered attempt: a
// delayed copy of that attempt may extend the lease of this handle, or,
// after Release, hold the key by nobody for one TTL. Neither puts a token
// in anyone's hands, so fences are unaffected; only the key's
// availability suffers.
//
// A grant that arrives after ctx ended is released the same way, and
// Acquire returns the context's cause, or ErrIndeterminate as above:
// cancellation never reads as success.
func (c *Client) Acquire(ctx context.Context, key string, p Policy) (*Handle, error) {
	t, err := leaseTarget(key)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, &t, p, false)
}

// TryAcquire makes exactly one attempt to acquire the lease on key, bounded
// by p's OperationTimeout, ignoring p's Wait and MaxAttempts. It never
// waits for a holder. Errors are as for Acquire.
func (c *Client) TryAcquire(ctx context.Context, key string, p Policy) (*Handle, error) {
	t, err := leaseTarget(key)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, &t, p, true)
}

// Inspect returns the state of key as the backend sees it. It never reveals
// a holder's secret. Only ctx bounds the call: there is no policy, hence no
// OperationTimeout, to apply.
func (c *Client) Inspect(ctx context.Context, key string) (Record, error) {
	if err := ValidateKey(key); err != nil {
		return Record{}, wrapOp("inspect", "", err)
	}
	r, err := c.b.Inspect(ctx, key)
	return r, wrapOp("inspect", key, err)
}

// attempts counts what one Acquire call did, for its event.
type attempts struct {
	start      time.Time     // when Acquire was called
	n          int           // backend attempts made
	latency    time.Duration // of the last attempt's backend call
	unanswered int           // attempts whose outcome is unknown
}

// leaseTarget validates key and returns the target of Acquire.
func leaseTarget(key string) (target, error) {
	if err := ValidateKey(key); err != nil {
		return target{}, wrapOp("acquire", "", err)
	}
	return target{kind: leaseKind, op: "acquire", key: key}, nil
}

// acquire runs the acquire loop of Acquire, AcquirePermit and AcquireSet
// (once: their Try variants) for t, which the caller validated.
func (c *Client) acquire(ctx context.Context, t *target, p Policy, once bool) (*Handle, error) {
	if !p.valid() {
		return nil, wrapOp(t.op, t.key, fmt.Errorf("%w: the zero Policy; build one with NewPolicy", ErrInvalidPolicy))
	}
	if err := ctx.Err(); err != nil {
		return nil, wrapOp(t.op, t.key, context.Cause(ctx))
	}
	o := p.o
	// 130 bits from crypto/rand, shared by every attempt of this call.
	req := AcquireRequest{Key: t.key, Owner: c.owner, Nonce: rand.Text(), TTL: o.TTL, Preferred: c.preferred && t.kind == leaseKind}
	at := attempts{start: c.clock.Now()}
	var (
		lastErr  error
		released <-chan struct{} // from a ReleaseWatcher, if any
		// watchAt is when to set up a watch: at the first refusal, and
		// after a watch that failed no sooner than Poll later, so that a
		// long wait is not left polling every Retry by one failed setup.
		watchAt time.Time
		// seen is the holder the last attempt found: its token, and the
		// latest instant its lease could end by that attempt's answer.
		seen struct {
			token Token
			until time.Time
		}
	)
	for {
		at.n++
		sent := at.start
		if at.n > 1 {
			sent = c.clock.Now()
		}
		// OperationTimeout runs on real time, whatever c's clock.
		octx, cancel := context.WithTimeout(ctx, o.OperationTimeout)
		g, err := t.attempt(octx, c.b, req)
		cancel()
		if !c.quiet {
			at.latency = c.clock.Now().Sub(sent) // for the event only
		}
		if err == nil {
			if ctx.Err() != nil {
				// Granted after the caller gave up: hand it back.
				return nil, c.acquireFailed(ctx, t, req.Nonce, g, p, at, context.Cause(ctx))
			}
			h := &Handle{c: c, key: g.key, nonce: req.Nonce, token: g.token, policy: p, deadline: sent.Add(p.LocalLifetime())}
			switch t.kind {
			case permitKind:
				h.sem, h.slot = t.key, g.slot
			case setKind:
				h.keys = t.keys
			}
			if !c.quiet {
				now := c.clock.Now()
				info := h.info()
				info.Latency = at.latency
				c.obs.Observe(&Acquired{info, at.n, now.Sub(at.start), h.deadline.Sub(now)})
			}
			c.maybeSweep()
			return h, nil
		}
		lastErr = err
		if errors.Is(err, ErrIndeterminate) {
			at.unanswered++
		}
		if errors.Is(err, ErrMisconfigured) {
			break // no retry can cure it: say so now, not when the wait ends
		}
		if ctx.Err() != nil {
			break
		}
		if once || (o.MaxAttempts > 0 && at.n >= o.MaxAttempts) {
			break
		}
		var na *NotAcquiredError
		held := errors.As(err, &na)
		if released == nil && held && (watchAt.IsZero() || !c.clock.Now().Before(watchAt)) {
			// One live watch per call (on every key t watches); a setup
			// that failed is tried again only once Poll has passed, and
			// until then the waiter polls every Retry.
			if w, ok := c.b.(ReleaseWatcher); ok {
				wctx, cancel := context.WithTimeout(ctx, o.OperationTimeout)
				ch, stop, werr := watch(wctx, w, t.watched())
				cancel()
				if werr == nil {
					released = ch
					defer stop()
				} else {
					watchAt = c.clock.Now().Add(o.Poll)
				}
			}
		}
		now := c.clock.Now()
		pause := jitter(o.Retry)
		if held && na.Remaining > 0 && released == nil {
			// No release notifications (the backend has no ReleaseWatcher,
			// or its watch failed): a release is seen only by asking, so
			// ask every Retry, as before, and no later than the holder's
			// expiry.
			pause = min(pause, na.Remaining+spread(min(o.Retry, na.Remaining)))
			seen.token = 0
		} else if held && na.Remaining > 0 {
			// Sleep until the holder's lease would end, and a little
			// longer, so that waiters do not all arrive at once and not
			// before the backend's clock says it ended. A holder that
			// renewed since the last attempt (its lease now ends later
			// than the last attempt's answer allowed) is alive: with
			// release notifications, checking again before Poll has
			// passed would only find it renewed again. (For a semaphore,
			// the holder is the one whose permit ends first; for a set,
			// the holder of the first key held.)
			pause = na.Remaining
			if na.Token == seen.token && sent.Add(na.Remaining).After(seen.until) {
				pause = max(pause, o.Poll)
			}
			pause += spread(min(o.Retry, na.Remaining))
			seen.token, seen.until = na.Token, now.Add(na.Remaining)
		} else {
			seen.token = 0
		}
		final := false
		if o.Wait > 0 {
			left := at.start.Add(o.Wait).Sub(now)
			if pause > left {
				if released == nil || left <= 0 {
					break // nothing can happen before Wait runs out
				}
				pause, final = left, true // only a release can help now
			}
		}
		woke, err := sleep(ctx, c.clock, pause, released)
		if err != nil || (final && !woke) {
			break // ctx ended, or Wait ran out
		}
	}
	if ctx.Err() != nil {
		// Say what the attempts found, unless the last one was cut short
		// by the context's end and would only repeat it.
		w := &waitError{cause: context.Cause(ctx), attempts: at.n}
		if !errors.Is(lastErr, ctx.Err()) {
			w.last = lastErr
		}
		lastErr = w
	}
	return nil, c.acquireFailed(ctx, t, req.Nonce, grant{}, p, at, lastErr)
}

// acquireFailed cleans up after a failed acquire call for t with the
// acquisition secret nonce. If an attempt went unanswered, or a grant g
// arrived too late (g.token is then set), it releases what the attempts
// may have granted (see target.cleanup) under a context detached from ctx
// and bounded by OperationTimeout. The outcome stays unknown after an
// unanswered attempt whatever the release says (see Client.Acquire); a
// late grant with no unanswered attempt before it is settled by a release
// that answers.
func (c *Client) acquireFailed(ctx context.Context, t *target, nonce string, g grant, p Policy, at attempts, err error) error {
	if at.unanswered > 0 || g.token != 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.o.OperationTimeout)
		a := Acquisition{Key: t.key, Owner: c.owner, Nonce: nonce, Token: g.token}
		rerr := t.cleanup(rctx, c.b, a, g, at.unanswered > 0)
		cancel()
		if at.unanswered > 0 || (rerr != nil && !errors.Is(rerr, ErrLost)) {
			err = &unknownAcquireError{err: err, release: rerr}
		}
	}
	err = wrapOp(t.op, t.key, err)
	if !c.quiet {
		info := EventInfo{Key: t.key, Keys: t.keys, Owner: c.owner, Latency: at.latency, Err: err}
		if t.kind == permitKind {
			info.Semaphore = t.key
		}
		c.obs.Observe(&AcquireFailed{info, at.n, c.clock.Now().Sub(at.start)})
	}
	return err
}

// jitter returns d shortened by a random amount of up to 20%, so that
// pauses never exceed what the policy's rules assume.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d - spread(d)
}

// spread returns a random duration of up to a fifth of d. jitter takes it
// off a retry pause; a pause that ends at a holder's expiry gets it added,
// so that waiters do not all wake at once, and not before the backend's
// clock says the lease ended.
func spread(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(mrand.Int64N(int64(d)/5 + 1))
}

// sleep waits for d on clock, or for a value on wake (which may be nil),
// or until ctx ends, whose cause it returns. woke reports a value on wake.
func sleep(ctx context.Context, clock Clock, d time.Duration, wake <-chan struct{}) (woke bool, err error) {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, context.Cause(ctx)
	case <-t.C():
		return false, nil
	case <-wake:
		return true, nil
	}
}

func isNotAcquired(err error) bool { return errors.Is(err, ErrNotAcquired) }
