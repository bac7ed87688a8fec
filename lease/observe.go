package lease

import (
	"context"
	"errors"
	"iter"
	"slices"
	"strconv"
	"time"
)

// ChangeWatcher is an optional Backend capability, found by type
// assertion: it tells an observer (Client.Observe) that a key's record
// changed, so that it reads the record at once instead of at its next
// poll.
type ChangeWatcher interface {
	// WatchChanges returns a channel that receives a value (at least once,
	// possibly more) after the record of key changed holder or state: a
	// grant to a new acquisition, a release, a hand-off, a force release,
	// a preferred candidate recorded. Renewals, and Acquire retried with
	// the holder's nonce, need not be announced, nor expiry (the observer
	// knows the holder's remaining time). The channel also receives a
	// value each time the watch is in place, the first time and again
	// after a reconnection, since a change may have gone unseen before.
	// The second result stops the watch and frees its resources; the
	// channel is never closed. ctx bounds the setup only.
	WatchChanges(ctx context.Context, key string) (<-chan struct{}, func(), error)
}

// Change says how a key's state came to be what an Observation reports,
// from the state the observer reported before.
type Change uint8

const (
	// ChangeInitial: the first observation, the state when observing
	// began.
	ChangeInitial Change = iota
	// ChangeAcquired: a new acquisition holds the key (also a candidate
	// that took a hand-off).
	ChangeAcquired
	// ChangeReleased: the holder released the key.
	ChangeReleased
	// ChangeExpired: the holder's TTL passed, or a hand-off's offer lapsed
	// with no candidate taking it.
	ChangeExpired
	// ChangeForceReleased: an operator ended the holder's lease.
	ChangeForceReleased
	// ChangeHandedOff: the holder handed the key off; it is offered to
	// Record.Candidates.
	ChangeHandedOff
	// ChangePreferred: only the preferred candidate (Record.Preferred)
	// changed.
	ChangePreferred
	// ChangeRecordLost: the backend lost the key's record, or its token
	// went down: data loss (see LostReason RecordLost), or the record
	// was removed after its retention.
	ChangeRecordLost
)

// String returns the change in words: "initial", "acquired",
// "released", "expired", "force-released", "handed off", "preferred" or
// "record lost".
func (c Change) String() string {
	switch c {
	case ChangeInitial:
		return "initial"
	case ChangeAcquired:
		return "acquired"
	case ChangeReleased:
		return "released"
	case ChangeExpired:
		return "expired"
	case ChangeForceReleased:
		return "force-released"
	case ChangeHandedOff:
		return "handed off"
	case ChangePreferred:
		return "preferred"
	case ChangeRecordLost:
		return "record lost"
	}
	return "Change(" + strconv.Itoa(int(c)) + ")"
}

// Observation is one state of a key that Client.Observe reports.
type Observation struct {
	// Record is the key's state as the backend reported it.
	Record
	// Change says how the state came to be from the one reported before.
	Change Change
	// At is when the client read the state, on the client's clock (the
	// moment the read was sent). The holder held the key then, for at
	// least Remaining after At.
	At time.Time
}

// ObserveOptions configure Client.Observe. The zero value is ready to use.
type ObserveOptions struct {
	// Poll is the longest time between two reads of the key: the bound
	// on how late a change is seen if a notification is missed, or if the
	// backend sends none (it is not a ChangeWatcher). Default
	// DefaultObservePoll.
	Poll time.Duration
	// OperationTimeout bounds each read. Default DefaultObserveTimeout.
	OperationTimeout time.Duration
}

// Defaults of ObserveOptions.
const (
	DefaultObservePoll    = time.Second
	DefaultObserveTimeout = 2 * time.Second
)

// Observe returns the leadership of key as a sequence of states: who holds
// it, with which token, since when, and how it changed. It is
// level-triggered, as etcd's Election.Observe is: the first state is the
// current one (ChangeInitial); after that, a state is reported when the
// holder, token, offer or preferred candidate changed (never for a mere
// renewal). The sequence is pulled, not pushed: each state is read from
// the backend after the loop body returned for the one before, so a slow
// observer is never handed a backlog or a state older than one it saw,
// only the latest state, and a state it was too slow to see is skipped.
// An iterator, not a channel, for that reason: there is no buffer to
// size or drain, no goroutine to leak, and breaking out of the loop ends
// the watch.
//
//	for o, err := range client.Observe(ctx, "reports", lease.ObserveOptions{}) {
//		if err != nil {
//			log.Print(err) // a read failed; Observe tries again
//			continue
//		}
//		fmt.Println(o.Change, o.Owner, o.Token)
//	}
//
// A change is seen at once on a ChangeWatcher backend (Valkey's shard
// channels, PostgreSQL's LISTEN), which also announces every reconnection,
// after which the state is read again, so no final state is missed; at
// most o.Poll late otherwise. An expiry is seen when the holder's
// remaining time runs out, by a read then.
//
// A failed read yields a zero Observation and the error, and Observe tries
// again after o.Poll (or at the next notification); the loop may go on or
// break. An invalid key, or an error matching ErrMisconfigured, is yielded
// and ends the sequence. It ends, without an error, when ctx ends.
func (c *Client) Observe(ctx context.Context, key string, o ObserveOptions) iter.Seq2[Observation, error] {
	if o.Poll <= 0 {
		o.Poll = DefaultObservePoll
	}
	if o.OperationTimeout <= 0 {
		o.OperationTimeout = DefaultObserveTimeout
	}
	return func(yield func(Observation, error) bool) {
		if err := ValidateKey(key); err != nil {
			yield(Observation{}, wrapOp("observe", "", err))
			return
		}
		ob := observer{c: c, key: key, o: o}
		defer ob.stopWatch()
		ob.run(ctx, yield)
	}
}

// observer is the state of one Observe sequence.
type observer struct {
	c     *Client
	key   string
	o     ObserveOptions
	wake  <-chan struct{} // a change was announced; nil without a watch
	stop  func()          // stops the watch
	last  Observation     // the last state yielded
	began bool            // a state was yielded
}

func (ob *observer) startWatch(ctx context.Context) {
	w, ok := ob.c.b.(ChangeWatcher)
	if !ok || ob.wake != nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, ob.o.OperationTimeout)
	defer cancel()
	if ch, stop, err := w.WatchChanges(wctx, ob.key); err == nil {
		ob.wake, ob.stop = ch, stop
	}
}

func (ob *observer) stopWatch() {
	if ob.stop != nil {
		ob.stop()
	}
}

func (ob *observer) run(ctx context.Context, yield func(Observation, error) bool) {
	clock := ob.c.clock
	for ctx.Err() == nil {
		// Watch before reading, so that a change after the read is
		// announced; set up again after a failed setup, at each poll.
		ob.startWatch(ctx)
		at := clock.Now()
		rctx, cancel := context.WithTimeout(ctx, ob.o.OperationTimeout)
		r, err := ob.c.b.Inspect(rctx, ob.key)
		cancel()
		wait := ob.o.Poll
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			err = wrapOp("observe", ob.key, err)
			if !yield(Observation{}, err) || errors.Is(err, ErrMisconfigured) {
				return
			}
		default:
			cur := Observation{Record: r, At: at}
			if ch, changed := ob.change(cur); changed {
				cur.Change = ch
				ob.last, ob.began = cur, true
				if !yield(cur, nil) {
					return
				}
			}
			// Read again when the holder's time, or the offer's window,
			// runs out: that is an expiry nobody announces.
			if (r.Held || len(r.Candidates) > 0) && r.Remaining >= 0 {
				if due := at.Add(r.Remaining + time.Millisecond).Sub(clock.Now()); due < wait {
					wait = max(due, 0)
				}
			}
		}
		t := clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-ob.wake:
			t.Stop()
		case <-t.C():
		}
	}
}

// change reports whether cur differs from the last state yielded in what
// an observer follows (holder, token, offer, preferred candidate), and
// how it came to be.
func (ob *observer) change(cur Observation) (Change, bool) {
	if !ob.began {
		return ChangeInitial, true
	}
	prev := ob.last
	p, r := prev.Record, cur.Record
	if p.Held == r.Held && p.Owner == r.Owner && p.Token == r.Token &&
		slices.Equal(p.Candidates, r.Candidates) && p.Ending == r.Ending {
		if p.Preferred != r.Preferred {
			return ChangePreferred, true
		}
		return 0, false
	}
	switch {
	case r.Token < p.Token:
		return ChangeRecordLost, true
	case r.Held:
		return ChangeAcquired, true
	case len(r.Candidates) > 0:
		return ChangeHandedOff, true
	}
	switch r.Ending {
	case EndReleased:
		return ChangeReleased, true
	case EndForceReleased:
		return ChangeForceReleased, true
	case EndExpired:
		return ChangeExpired, true
	case EndHandedOff:
		// The offer lapsed (or was seen only once it had).
		if p.Token == r.Token && len(p.Candidates) > 0 {
			return ChangeExpired, true
		}
		return ChangeHandedOff, true
	}
	// The backend cannot tell: an end after the holder's time ran out is
	// an expiry, an earlier one a release.
	if p.Held && !cur.At.Before(prev.At.Add(p.Remaining)) {
		return ChangeExpired, true
	}
	if p.Held {
		return ChangeReleased, true
	}
	if r.Token == 0 && p.Token > 0 {
		return ChangeRecordLost, true
	}
	return ChangeReleased, true
}
