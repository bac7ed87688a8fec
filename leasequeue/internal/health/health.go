// Package health watches the local deadlines of the leases a worker holds,
// for the queues and the partition groups of package leasequeue: a worker
// whose renewals fall behind takes no new work.
package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue/queueevent"
)

// Tracker watches the local deadlines of the leases a worker holds. It
// needs no I/O: a lease whose renewals succeed on schedule always has a
// local deadline at least overdueBelow away (see overdue); one that is
// nearer means a renewal failed or hangs, and the worker takes no new work
// until it recovers. A lease lost because its renewals did not go through
// keeps the worker from new work for a TTL more, even when it holds no
// other lease to tell by.
//
// T is what the worker keeps with each lease (a queue's claim); the zero
// Tracker is ready to use.
type Tracker[T any] struct {
	mu        sync.Mutex
	held      map[*lease.Handle]tracked[T]
	sickUntil time.Time
}

type tracked[T any] struct {
	id   string
	v    T
	seen time.Time // the deadline at the last beat
}

// Add tracks lease h of item or partition id, with v.
func (t *Tracker[T]) Add(h *lease.Handle, id string, v T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held == nil {
		t.held = make(map[*lease.Handle]tracked[T])
	}
	t.held[h] = tracked[T]{id: id, v: v, seen: h.Deadline()}
}

// Find returns what is kept with the tracked lease on key with token, or
// the zero T.
func (t *Tracker[T]) Find(key string, token lease.Token) T {
	t.mu.Lock()
	defer t.mu.Unlock()
	for h, tr := range t.held {
		if h.Token() == token && h.Key() == key {
			return tr.v
		}
	}
	var zero T
	return zero
}

// Remove stops tracking h.
func (t *Tracker[T]) Remove(h *lease.Handle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.held, h)
}

// overdue reports whether the renewal of h is overdue at now. Managed
// renews every RenewEvery (or sooner), and a renewal takes at most
// OperationTimeout; a local deadline nearer than LocalLifetime −
// RenewEvery − OperationTimeout − Retry (Retry absorbs scheduling delays)
// means the last renewal did not succeed. Policy's rules keep that bound
// above OperationTimeout.
func overdue(h *lease.Handle, now time.Time) bool {
	p := h.Policy()
	o := p.Options()
	return h.Deadline().Sub(now) < p.LocalLifetime()-o.RenewEvery-o.OperationTimeout-o.Retry
}

// Lost records the loss of h with err at now.
func (t *Tracker[T]) Lost(h *lease.Handle, err error, now time.Time) {
	var le *lease.LostError
	if errors.As(err, &le) && le.Reason == lease.DeadlinePassed {
		t.mu.Lock()
		defer t.mu.Unlock()
		if until := now.Add(h.Policy().TTL()); until.After(t.sickUntil) {
			t.sickUntil = until
		}
	}
}

// Healthy reports whether no tracked lease is overdue at now, and no lease
// was lost to failing renewals in the last TTL.
func (t *Tracker[T]) Healthy(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Before(t.sickUntil) {
		return false
	}
	for h := range t.held {
		if overdue(h, now) {
			return false
		}
	}
	return true
}

// Beat returns a Heartbeat for each tracked lease whose deadline moved
// since the last beat, or whose renewal is overdue, with an error wrapping
// unhealthy.
func (t *Tracker[T]) Beat(now time.Time, info queueevent.EventInfo, unhealthy error) []*queueevent.Heartbeat {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*queueevent.Heartbeat
	for h, tr := range t.held {
		d := h.Deadline()
		e := &queueevent.Heartbeat{EventInfo: info, Deadline: d}
		e.ID, e.Key, e.Token = tr.id, h.Key(), h.Token()
		switch {
		case overdue(h, now):
			e.Err = fmt.Errorf("%w: lease %q has %v left before its local deadline", unhealthy, h.Key(), d.Sub(now).Round(time.Millisecond))
		case d.After(tr.seen):
		default:
			continue
		}
		tr.seen = d
		t.held[h] = tr
		out = append(out, e)
	}
	return out
}

// Sleep waits for d on clock, or until ctx ends, whose cause it returns.
func Sleep(ctx context.Context, clock lease.Clock, d time.Duration) error {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C():
		return nil
	}
}
