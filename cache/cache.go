package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/cache/cacheevent"
	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/lease"
)

// Options configure a Cache. Only TTL is required; every other zero value
// means the default given with the field.
type Options struct {
	// Store is the Valkey lease Store the refresh leases live in: the
	// backend of the lease client given to New, or the Store it wraps (a
	// decorator of your own, leasetest.CountCalls). Default: the lease
	// client's backend, which must then be a *leasevalkey.Store. Every
	// publication checks the refresh lease's record in Store, so a Store
	// that is not the one under the lease client makes every publication
	// fail its check: nothing is ever published, nothing stale either.
	Store *leasevalkey.Store

	// TTL is how long a published value stays fresh, on the server's
	// clock. Required; at least 1ms. The server keeps whole milliseconds
	// and rounds up.
	TTL time.Duration

	// StaleFor is how long after TTL a value is kept, to be served to a
	// Get that finds it past its TTL while another process holds the
	// refresh lease: such a Get returns at once with Outcome Stale instead
	// of waiting. Default 0: a value is deleted when its TTL passes and
	// every Get without a fresh value waits for the refresh.
	StaleFor time.Duration

	// Wait bounds how long Get waits for a value that another process is
	// loading; after it Get returns an error matching ErrWaitTimeout. The
	// caller's context bounds the wait too. Default 30s.
	Wait time.Duration

	// LeaseTTL is the TTL of the refresh lease. It is renewed every
	// LeaseTTL/3 while a load runs, so a load may take longer; it is also
	// how long a refresher that died without releasing the lease keeps
	// others waiting. At least lease.MinTTL. Default 10s.
	LeaseTTL time.Duration

	// Prefix starts the key of every refresh lease (Prefix + cache key)
	// and the name of every key and channel the Cache keeps on the server,
	// so that ACL rules can name them (~cache:* and &cache:*). Caches that
	// share a Prefix and a lease Store on the same servers share their
	// entries. It must not contain '{' or '}'. Default DefaultPrefix
	// ("cache:").
	Prefix string

	// Observer receives an event for every Get, load, publication and
	// invalidation. Default NopObserver.
	Observer Observer
}

// Defaults of Options.
const (
	DefaultWait     = 30 * time.Second
	DefaultLeaseTTL = 10 * time.Second
)

// maxReloads is how many times a Get loads again after its publication was
// refused because the entry was invalidated while it loaded.
const maxReloads = 3

// LoadFunc computes the value of a cache entry from its source. It runs
// while its caller holds the entry's refresh lease, under a context that
// is cancelled if the lease is lost or every Get waiting for it gives up.
// token is the refresh lease's fencing token, for writes the load makes
// elsewhere. The returned slice must not be modified afterwards: it is
// published and handed to every Get waiting for it.
type LoadFunc func(ctx context.Context, token lease.Token) ([]byte, error)

// Outcome says how Get obtained the value it returned. It is
// cacheevent.Outcome, so that the Served event can carry it.
type Outcome = cacheevent.Outcome

const (
	// Hit means a fresh value was on the server. It takes one round trip,
	// or two when a Cache without StaleFor reads a value that a Cache with
	// StaleFor published.
	Hit = cacheevent.Hit
	// Loaded means this Get ran its load function and published the value.
	Loaded = cacheevent.Loaded
	// Shared means another Get loaded the value, in this process or
	// another one, and this one waited for it.
	Shared = cacheevent.Shared
	// Stale means the value is past its TTL (but within StaleFor) and
	// another process is refreshing it.
	Stale = cacheevent.Stale
)

// Info describes the value a Get returned.
type Info struct {
	// Outcome says how Get obtained it.
	Outcome Outcome
	// Token is the token of the refresh lease's acquisition that published
	// the value.
	Token lease.Token
}

// A Cache reads, loads, publishes and invalidates entries on the Valkey
// servers behind one valkey-go client, with refresh leases from one
// lease.Client on a Valkey lease Store. It is safe for concurrent use.
type Cache struct {
	client valkey.Client
	leases *lease.Client
	store  *leasevalkey.Store
	policy lease.Policy
	prefix string
	// tagPrefix opens every entry's hash tag: '{' and prefix escaped, as
	// in the record's hash tag; see keys.go.
	tagPrefix string
	ttl       time.Duration
	stale     time.Duration
	wait      time.Duration
	obs       Observer // nil means NopObserver: no event is built
	marks     *Sweeper // Sweep's: the Sweeper of Prefix and store

	mu      sync.Mutex
	flights map[string]*flight // by cache key; see flight.go
}

// New returns a Cache that keeps its entries on the servers behind client
// and takes refresh leases from leases, whose backend must be a Valkey
// lease Store (*leasevalkey.Store) built on the same servers, or wrap one
// given as Options.Store: every publication checks the refresh lease's
// record in the same script that writes the value, so the record and the
// entry must live on one server, in one hash slot. New fails if an
// argument is nil, there is no Store (Options.Store is nil and the
// backend is not a *leasevalkey.Store), or an option is invalid. It does
// not talk to the server. The Cache never closes client.
func New(client valkey.Client, leases *lease.Client, o Options) (*Cache, error) {
	if client == nil {
		return nil, errors.New("cache: New: nil valkey client")
	}
	if leases == nil {
		return nil, errors.New("cache: New: nil lease client")
	}
	store := o.Store
	if store == nil {
		var ok bool
		if store, ok = leases.Backend().(*leasevalkey.Store); !ok {
			return nil, fmt.Errorf("cache: New: the lease client's backend is a %T, not a *leasevalkey.Store, and Options.Store is nil: the refresh lease must live next to the entries it guards (give the Store a wrapping backend wraps as Options.Store)", leases.Backend())
		}
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Wait == 0 {
		o.Wait = DefaultWait
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if err := checkPrefix("New", o.Prefix); err != nil {
		return nil, err
	}
	switch {
	case o.TTL < time.Millisecond:
		return nil, fmt.Errorf("cache: New: TTL (%v) must be at least 1ms", o.TTL)
	case o.StaleFor < 0:
		return nil, fmt.Errorf("cache: New: StaleFor (%v) must not be negative", o.StaleFor)
	case o.Wait < 0:
		return nil, fmt.Errorf("cache: New: Wait (%v) must not be negative", o.Wait)
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: o.LeaseTTL})
	if err != nil {
		return nil, fmt.Errorf("cache: New: LeaseTTL: %w", err)
	}
	c := &Cache{client: client, leases: leases, store: store, policy: policy,
		prefix: o.Prefix, tagPrefix: "{" + keyspace.Escape(o.Prefix),
		ttl: o.TTL, stale: o.StaleFor, wait: o.Wait, obs: o.Observer}
	c.marks = &Sweeper{client: client, store: store, prefix: c.prefix}
	if c.obs == NopObserver {
		c.obs = nil
	}
	return c, nil
}

// LeaseKey returns the key of the refresh lease of the cache entry key:
// Prefix + key. Acquire it through the Cache's lease client to publish
// with Publish.
func (c *Cache) LeaseKey(key string) string { return c.prefix + key }

// observe passes the event made by mk to the observer, if there is one,
// so that a Cache without an observer builds no events.
func (c *Cache) observe(mk func() Event) {
	if c.obs != nil {
		c.obs.Observe(mk())
	}
}

// Get returns the value of key: at once if a fresh value is on the server
// (one round trip; see Hit); otherwise it is a singleflight.Do across every process
// that shares the servers and Prefix. Exactly one caller at a time, in
// whichever process gets key's refresh lease, runs its load function and
// publishes the value; the other callers wait for that publication (woken
// by a message the publication sends, not by polling) and return it, or,
// with StaleFor set and a value past its TTL, return that value at once
// marked Stale. Info says which happened.
//
// The wait is bounded by ctx and Options.Wait. If the refresher dies, its
// lease expires after LeaseTTL and a waiting caller takes over.
//
// load runs in a goroutine of the Cache, under a context that is cancelled
// when every caller waiting for it has given up, or when the refresh lease
// is lost. If load returns an error, panics (reported as a *PanicError), or
// loses the lease, nothing is published, the lease is released, and the
// callers waiting for it in this process get the error; the next Get
// refreshes again. If the entry is invalidated while load runs, its value
// is not published and load runs again (up to 3 times).
//
// Within one process, callers share one load and one wait per key. A
// returned value that was loaded or shared may be the same slice for
// several callers: do not modify it. Values of any size are read and
// written whole: a Get never sees part of one value and part of another.
func (c *Cache) Get(ctx context.Context, key string, load LoadFunc) ([]byte, Info, error) {
	if c.obs == nil {
		return c.get(ctx, key, load)
	}
	start := time.Now()
	val, info, err := c.get(ctx, key, load)
	i := EventInfo{Key: key, Token: info.Token, Latency: time.Since(start), Err: err}
	if err != nil {
		c.obs.Observe(&GetFailed{EventInfo: i})
	} else {
		c.obs.Observe(&Served{EventInfo: i, Outcome: info.Outcome})
	}
	return val, info, err
}

func (c *Cache) get(ctx context.Context, key string, load LoadFunc) ([]byte, Info, error) {
	const op = "get"
	if err := c.checkKey(op, key); err != nil {
		return nil, Info{}, err
	}
	if load == nil {
		return nil, Info{}, fmt.Errorf("cache: %s %q: nil load function", op, key)
	}
	fresh, value := c.readNames(key)
	e, err := c.read(ctx, fresh, value)
	if err != nil {
		return nil, Info{}, wrapOp(op, key, err)
	}
	if e.fresh {
		return e.val, Info{Outcome: Hit, Token: e.token}, nil
	}
	k, err := c.entryKeys(op, key, fresh, value)
	if err != nil {
		return nil, Info{}, err
	}
	for {
		stale := e.stale && c.stale > 0
		f, t := c.join(ctx, k, load, stale)
		if f == nil {
			// Another Get in this process is refreshing it already.
			return e.val, Info{Outcome: Stale, Token: e.token}, nil
		}
		r, err := c.await(ctx, f)
		switch {
		case err != nil:
			return nil, Info{}, wrapOp(op, key, err)
		case r.err != nil:
			return nil, Info{}, wrapOp(op, key, r.err)
		case r.elsewhere && stale:
			return e.val, Info{Outcome: Stale, Token: e.token}, nil
		case t.seq < r.seq && !r.elsewhere:
			info := r.info
			if info.Outcome == Loaded && !t.creator {
				info.Outcome = Shared
			}
			return r.val, info, nil
		}
		// Either the flight was started by a Get that had a stale value to
		// return and did not wait, or it read or published its value after
		// this Get joined it, while this Get's own read found nothing: the
		// value may have been invalidated in between. Look again.
		if e, err = c.read(ctx, k.fresh, k.value); err != nil {
			return nil, Info{}, wrapOp(op, key, err)
		}
		if e.fresh {
			return e.val, Info{Outcome: Hit, Token: e.token}, nil
		}
	}
}
