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
}

// A Client acquires leases from a Backend on behalf of one owner. It is
// safe for concurrent use; one Client per process and backend is typical.
type Client struct {
	b     Backend
	owner string
	clock Clock
	obs   Observer
	quiet bool // obs is NopObserver: build no events
}

// NewClient returns a Client that acquires leases from b. It fails if b is
// nil or o.Owner is invalid. The client never closes b.
func NewClient(b Backend, o ClientOptions) (*Client, error) {
	if b == nil {
		return nil, errors.New("lease: NewClient: nil Backend")
	}
	if err := ValidateOwner(o.Owner); err != nil {
		return nil, fmt.Errorf("lease: NewClient: %w", err)
	}
	c := &Client{b: b, owner: o.Owner, clock: o.Clock, obs: o.Observer}
	if c.clock == nil {
		c.clock = SystemClock()
	}
	if c.obs == nil {
		c.obs = NopObserver
	}
	c.quiet = c.obs == NopObserver
	return c, nil
}

// Owner returns the client's owner string.
func (c *Client) Owner() string { return c.owner }

// Clock returns the clock the client measures deadlines on, so that code
// built on the client can compare a Handle's Deadline with the same clock.
func (c *Client) Clock() Clock { return c.clock }

// Backend returns the backend the client was built with.
func (c *Client) Backend() Backend { return c.b }

// Acquire acquires the lease on key, trying again every p's Retry (jittered)
// while the lease is held by someone else or the backend fails, until p's
// Wait has passed or p's MaxAttempts were made, whichever comes first. Each
// attempt is bounded by p's OperationTimeout.
//
// On success the returned Handle holds the lease with a fresh token; its
// local deadline is TTL − SafetyMargin after the successful request was
// sent. Start managed renewal with Handle.StartManaged, or renew by hand.
//
// On failure Acquire returns a *NotAcquiredError (matching ErrNotAcquired)
// when the lease stayed held by someone else, the context's error when ctx
// ended, or the last backend error. Attempts reuse one acquisition secret,
// so an attempt whose outcome was unknown is resolved by the next one. If
// Acquire gives up after such an attempt, it releases whatever that attempt
// may have granted before returning; if that release's outcome is unknown
// too, the error matches ErrIndeterminate and the lease may stay held, by
// nobody, until its TTL passes. A grant that arrives after ctx ended is
// released the same way, and Acquire returns the context's error:
// cancellation never reads as success.
func (c *Client) Acquire(ctx context.Context, key string, p Policy) (*Handle, error) {
	return c.acquire(ctx, key, p, false)
}

// TryAcquire makes exactly one attempt to acquire the lease on key, bounded
// by p's OperationTimeout, ignoring p's Wait and MaxAttempts. It never
// waits for a holder. Errors are as for Acquire.
func (c *Client) TryAcquire(ctx context.Context, key string, p Policy) (*Handle, error) {
	return c.acquire(ctx, key, p, true)
}

// Inspect returns the state of key as the backend sees it. It never reveals
// a holder's secret. Only ctx bounds the call: there is no policy, hence no
// OperationTimeout, to apply.
func (c *Client) Inspect(ctx context.Context, key string) (Record, error) {
	if err := ValidateKey(key); err != nil {
		return Record{}, err
	}
	r, err := c.b.Inspect(ctx, key)
	return r, wrapOp("inspect", key, err)
}

func (c *Client) acquire(ctx context.Context, key string, p Policy, once bool) (*Handle, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if !p.valid() {
		return nil, fmt.Errorf("%w: the zero Policy; build one with NewPolicy", ErrInvalidPolicy)
	}
	if err := ctx.Err(); err != nil {
		return nil, wrapOp("acquire", key, context.Cause(ctx))
	}
	o := p.o
	req := AcquireRequest{Key: key, Owner: c.owner, Nonce: rand.Text(), TTL: o.TTL}
	start := c.clock.Now()
	sent := start
	waitUntil := start.Add(o.Wait)
	var (
		lastErr  error
		unsure   bool // some attempt may have been applied
		attempts int
		released <-chan struct{} // from a ReleaseWatcher, if any
	)
	for {
		attempts++
		if attempts > 1 {
			sent = c.clock.Now()
		}
		octx, cancel := context.WithTimeout(ctx, o.OperationTimeout)
		tok, err := c.b.Acquire(octx, req)
		cancel()
		if err == nil {
			if ctx.Err() != nil {
				// Granted after the caller gave up: hand it back.
				granted := Acquisition{Key: key, Owner: c.owner, Nonce: req.Nonce, Token: tok}
				return nil, c.acquireFailed(ctx, granted, p, start, attempts, context.Cause(ctx), true)
			}
			h := &Handle{c: c, key: key, nonce: req.Nonce, token: tok, policy: p,
				deadline: sent.Add(p.LocalLifetime())}
			if !c.quiet {
				c.obs.Observe(&Acquired{EventInfo{Key: key, Owner: c.owner, Token: tok, Latency: c.clock.Now().Sub(start)}, attempts})
			}
			return h, nil
		}
		lastErr = err
		if errors.Is(err, ErrIndeterminate) {
			unsure = true
		}
		if ctx.Err() != nil {
			lastErr = context.Cause(ctx)
			break
		}
		if once || (o.MaxAttempts > 0 && attempts >= o.MaxAttempts) {
			break
		}
		pause := jitter(o.Retry)
		var na *NotAcquiredError
		if errors.As(err, &na) && na.Remaining > 0 && na.Remaining < pause {
			pause = na.Remaining // the holder's lease ends sooner than the next retry
		}
		if c.clock.Now().Add(pause).After(waitUntil) {
			break
		}
		if released == nil && errors.Is(err, ErrNotAcquired) {
			if w, ok := c.b.(ReleaseWatcher); ok {
				wctx, cancel := context.WithTimeout(ctx, o.OperationTimeout)
				ch, stop, werr := w.WatchReleases(wctx, key)
				cancel()
				if werr == nil {
					released = ch
					defer stop()
				}
			}
		}
		if err := sleep(ctx, c.clock, pause, released); err != nil {
			lastErr = err
			break
		}
	}
	a := Acquisition{Key: key, Owner: c.owner, Nonce: req.Nonce}
	return nil, c.acquireFailed(ctx, a, p, start, attempts, lastErr, unsure)
}

// acquireFailed cleans up after a failed Acquire: if an attempt may have
// been applied, it releases acquisition a under a context detached from ctx
// and bounded by OperationTimeout.
func (c *Client) acquireFailed(ctx context.Context, a Acquisition, p Policy, start time.Time, attempts int, err error, unsure bool) error {
	if unsure {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.o.OperationTimeout)
		rerr := c.b.Release(rctx, a)
		cancel()
		switch {
		case rerr != nil && !errors.Is(rerr, ErrLost):
			err = Indeterminate(fmt.Errorf("%w (and releasing what an unanswered attempt may have acquired failed: %w)", err, rerr))
		case errors.Is(err, ErrIndeterminate):
			// The release settled it: whatever the attempt did is undone.
			// Keep the cause, drop the claim that the outcome is unknown.
			err = &undoneError{err}
		}
	}
	err = wrapOp("acquire", a.Key, err)
	if !c.quiet {
		c.obs.Observe(&AcquireFailed{EventInfo{Key: a.Key, Owner: c.owner, Latency: c.clock.Now().Sub(start), Err: err}, attempts})
	}
	return err
}

// jitter returns d shortened by a random amount of up to 20%, so that
// pauses never exceed what the policy's rules assume.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d - time.Duration(mrand.Int64N(int64(d)/5+1))
}

// sleep waits for d on clock, or for a value on wake (which may be nil),
// or until ctx ends, whose cause it returns.
func sleep(ctx context.Context, clock Clock, d time.Duration, wake <-chan struct{}) error {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C():
	case <-wake:
	}
	return nil
}

func isNotAcquired(err error) bool { return errors.Is(err, ErrNotAcquired) }
