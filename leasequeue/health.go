package leasequeue

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/golib/lease/lease"
)

// tracker watches the local deadlines of the leases a worker holds. It
// needs no I/O: a lease whose renewals succeed on schedule always has a
// local deadline at least overdueBelow away (see overdue); one that is
// nearer means a renewal failed or hangs, and the worker takes no new work
// until it recovers. A lease lost because its renewals did not go through
// keeps the worker from new work for a TTL more, even when it holds no
// other lease to tell by.
type tracker struct {
	mu        sync.Mutex
	held      map[*lease.Handle]tracked
	sickUntil time.Time
}

type tracked struct {
	id   string
	c    *Claim    // the claim under h, if h is an item's lease
	seen time.Time // the deadline at the last beat
}

// add tracks lease h of item or partition id, whose claim c is (nil if
// h is a partition's lease).
func (t *tracker) add(h *lease.Handle, id string, c *Claim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held == nil {
		t.held = make(map[*lease.Handle]tracked)
	}
	t.held[h] = tracked{id: id, c: c, seen: h.Deadline()}
}

// find returns the tracked claim of the lease on key with token, or nil
// (also when that lease is a partition's).
func (t *tracker) find(key string, token lease.Token) *Claim {
	t.mu.Lock()
	defer t.mu.Unlock()
	for h, tr := range t.held {
		if h.Token() == token && h.Key() == key {
			return tr.c
		}
	}
	return nil
}

func (t *tracker) remove(h *lease.Handle) {
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

// lost records the loss of h with err at now.
func (t *tracker) lost(h *lease.Handle, err error, now time.Time) {
	var le *lease.LostError
	if errors.As(err, &le) && le.Reason == lease.DeadlinePassed {
		t.mu.Lock()
		defer t.mu.Unlock()
		if until := now.Add(h.Policy().TTL()); until.After(t.sickUntil) {
			t.sickUntil = until
		}
	}
}

// healthy reports whether no tracked lease is overdue at now, and no lease
// was lost to failing renewals in the last TTL.
func (t *tracker) healthy(now time.Time) bool {
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

// beat returns a Heartbeat for each tracked lease whose deadline moved
// since the last beat, or whose renewal is overdue.
func (t *tracker) beat(now time.Time, info EventInfo) []*Heartbeat {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*Heartbeat
	for h, tr := range t.held {
		d := h.Deadline()
		e := &Heartbeat{EventInfo: info, Deadline: d}
		e.ID, e.Key, e.Token = tr.id, h.Key(), h.Token()
		switch {
		case overdue(h, now):
			e.Err = fmt.Errorf("%w: lease %q has %v left before its local deadline", ErrUnhealthy, h.Key(), d.Sub(now).Round(time.Millisecond))
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
