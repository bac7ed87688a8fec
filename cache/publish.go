package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/golib/lease/guard"
	"github.com/golib/lease/lease"
)

// Publish writes value as the entry of key, fresh for ttl (Options.TTL if
// ttl is 0) and kept StaleFor longer, in one script and one round trip,
// if and only if, when the server runs the script:
//
//   - the refresh lease's record still shows g's acquisition: the same
//     token and owner, not expired on the server's clock; otherwise it
//     returns an error wrapping a *guard.NotCurrentError (matching
//     guard.ErrNotCurrent) that says what the record shows instead;
//   - key was not invalidated since g's acquisition began; otherwise it
//     returns an *InvalidatedError (matching ErrInvalidated).
//
// Either way, a refused publication changes nothing. An error matching
// lease.ErrIndeterminate means the outcome is unknown (a timeout, a lost
// connection); any other error means nothing was written.
//
// g must come from the Store of the Cache's lease client, for an
// acquisition of LeaseKey(key); Publish refuses any other guard before any
// I/O, since its record would not share the entry's hash slot. Get calls
// Publish itself; call it directly to refresh entries outside Get:
//
//	h, err := leases.TryAcquire(ctx, c.LeaseKey(key), policy)
//	...
//	g, err := store.Guard(h.Snapshot())
//	...
//	err = c.Publish(ctx, g, key, value, 0)
func (c *Cache) Publish(ctx context.Context, g guard.Guard, key string, value []byte, ttl time.Duration) error {
	const op = "publish"
	k, err := c.keys(op, key)
	if err != nil {
		return err
	}
	switch {
	case ttl < 0:
		return fmt.Errorf("cache: %s %q: ttl %v is negative", op, key, ttl)
	case ttl == 0:
		ttl = c.ttl
	case ttl < time.Millisecond:
		return fmt.Errorf("cache: %s %q: ttl %v is less than 1ms", op, key, ttl)
	}
	switch {
	case g.IsZero():
		return fmt.Errorf("cache: %s %q: the zero Guard", op, key)
	case g.Kind() != guard.Valkey:
		return fmt.Errorf("cache: %s %q: a %s guard; the cache needs one from a Valkey lease Store", op, key, g.Kind())
	case g.Key() != k.lease:
		return fmt.Errorf("cache: %s %q: the guard is for lease %q, not the entry's refresh lease %q", op, key, g.Key(), k.lease)
	case g.Record() != k.record:
		return fmt.Errorf("cache: %s %q: the guard's lease record %q is not %q: it comes from a Store with another Prefix than the Cache's", op, key, g.Record(), k.record)
	}
	return c.publish(ctx, g, k, value, ttl)
}

// publish runs the publish script for an already checked guard.
func (c *Cache) publish(ctx context.Context, g guard.Guard, k keys, value []byte, ttl time.Duration) error {
	const op = "publish"
	start := time.Now()
	err := c.runPublish(ctx, g, k, value, ttl)
	info := EventInfo{Key: k.key, Token: g.Token(), Latency: time.Since(start), Err: err}
	if err != nil {
		c.observe(func() Event { return &PublishRefused{EventInfo: info} })
		return wrapOp(op, k.key, err)
	}
	c.observe(func() Event { return &Published{EventInfo: info, Size: len(value)} })
	return nil
}

func (c *Cache) runPublish(ctx context.Context, g guard.Guard, k keys, value []byte, ttl time.Duration) error {
	if ctx.Err() != nil {
		return fmt.Errorf("not sent: %w", context.Cause(ctx))
	}
	res := publishScript.Exec(ctx, c.client,
		[]string{k.record, k.mark, k.value, k.fresh},
		[]string{g.Token().String(), g.Owner(), c.stored(g.Token(), value), millis(ttl), millis(ttl + c.stale), k.channel, c.mode()})
	vals, err := res.ToArray()
	if err != nil {
		return classify(err)
	}
	if len(vals) == 0 {
		return lease.Indeterminate(errors.New("empty reply from the publish script"))
	}
	switch n, _ := vals[0].AsInt64(); {
	case n == publishDone && len(vals) == 1:
		return nil
	case n == publishNotCurrent && len(vals) == 5:
		tok, err := vals[1].ToString()
		owner, _ := vals[2].ToString()
		expires, _ := vals[3].AsInt64()
		now, _ := vals[4].AsInt64()
		return &guard.NotCurrentError{Key: g.Key(), Token: g.Token(), Detail: notCurrentDetail(g, err == nil, tok, owner, expires, now)}
	case n == publishInvalidated && len(vals) == 2:
		mark, _ := vals[1].AsInt64()
		return &InvalidatedError{Key: k.key, Token: g.Token(), Mark: lease.Token(mark)}
	}
	return lease.Indeterminate(fmt.Errorf("unexpected reply from the publish script: %v", vals))
}

// notCurrentDetail says what the lease record showed instead of g's
// acquisition: the record's token, owner and expiry (µs since the epoch, 0
// once released), and the server's time in µs.
func notCurrentDetail(g guard.Guard, found bool, token, owner string, expires, now int64) string {
	switch {
	case !found:
		return "there is no lease record (the lease was never acquired, or the server lost it)"
	case token != g.Token().String() || owner != g.Owner():
		return fmt.Sprintf("the record shows token %s of %q", token, owner)
	case expires == 0:
		return "it was released"
	}
	return fmt.Sprintf("it expired %v ago on the server's clock", (time.Duration(now-expires) * time.Microsecond).Round(time.Millisecond))
}

// millis returns d in whole milliseconds, rounded up.
func millis(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

// Invalidate deletes the entry of key, fresh or stale, and makes sure that
// no refresh whose refresh lease was acquired before Invalidate ran on the
// server can publish: once Invalidate returns nil, every later Get loads
// the value anew, from a source read after Invalidate. Call it after the
// change to the source is committed. Gets that are loading at that moment
// load again.
//
// It is one script and one round trip. An error matching
// lease.ErrIndeterminate means the outcome is unknown: call it again. Any
// other error means nothing changed.
func (c *Cache) Invalidate(ctx context.Context, key string) error {
	const op = "invalidate"
	k, err := c.keys(op, key)
	if err != nil {
		return err
	}
	start := time.Now()
	var mark int64
	if ctx.Err() != nil {
		err = fmt.Errorf("not sent: %w", context.Cause(ctx))
	} else {
		mark, err = invalidateScript.Exec(ctx, c.client, []string{k.record, k.mark, k.value, k.fresh}, nil).AsInt64()
		err = classify(err)
	}
	c.observe(func() Event {
		return &Invalidated{EventInfo: EventInfo{Key: key, Token: lease.Token(mark), Latency: time.Since(start), Err: err}}
	})
	return wrapOp(op, key, err)
}
