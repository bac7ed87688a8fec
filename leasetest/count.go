package leasetest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/golib/lease/lease"
)

// Calls counts the calls made through a backend that CountCalls wrapped,
// one counter per method. Read them with Load; they are safe for
// concurrent use.
type Calls struct {
	Acquire, Renew, Release, Inspect atomic.Int64
	// WatchReleases counts release-watch setups, made only through a
	// wrapped lease.ReleaseWatcher.
	WatchReleases atomic.Int64
}

// Total returns the number of calls of the four lease.Backend methods.
func (c *Calls) Total() int64 {
	return c.Acquire.Load() + c.Renew.Load() + c.Release.Load() + c.Inspect.Load()
}

// CountCalls returns b wrapped so that every call made through it is
// counted in the returned Calls: for a test that checks how often code
// asks the backend, such as that a standby waiting for a held key makes
// about one call per TTL. The wrapper implements lease.ReleaseWatcher if
// b does, so that a lease.Client still waits for release notifications;
// b's other optional capabilities (lease.Lister, lease.ForceReleaser) are
// not passed on. It adds no behaviour of its own.
func CountCalls(b lease.Backend) (lease.Backend, *Calls) {
	c := &counting{Backend: b, n: new(Calls)}
	if w, ok := b.(lease.ReleaseWatcher); ok {
		return &countingWatcher{c, w}, c.n
	}
	return c, c.n
}

type counting struct {
	lease.Backend
	n *Calls
}

func (c *counting) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	c.n.Acquire.Add(1)
	return c.Backend.Acquire(ctx, r)
}

func (c *counting) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	c.n.Renew.Add(1)
	return c.Backend.Renew(ctx, a, ttl)
}

func (c *counting) Release(ctx context.Context, a lease.Acquisition) error {
	c.n.Release.Add(1)
	return c.Backend.Release(ctx, a)
}

func (c *counting) Inspect(ctx context.Context, key string) (lease.Record, error) {
	c.n.Inspect.Add(1)
	return c.Backend.Inspect(ctx, key)
}

type countingWatcher struct {
	*counting
	w lease.ReleaseWatcher
}

func (c *countingWatcher) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	c.n.WatchReleases.Add(1)
	return c.w.WatchReleases(ctx, key)
}
