package valkey

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/guard"
	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/lease"
)

// Options configure a Store. The zero value is valid.
type Options struct {
	// Prefix starts the name of every key and channel the Store uses, so
	// that leases can share a server with other data and ACL rules can
	// name them (~lease:* and &lease:*). Default DefaultPrefix ("lease:").
	// It must not contain '{' or '}', which would break the hash tag that
	// keeps each lease in one hash slot. Stores that share a prefix on the
	// same server share their leases.
	Prefix string

	// Retention is how long the record of a lease is kept after the lease
	// ended, by Release, ForceRelease or expiry, so that Inspect and List
	// still show the key's last holder and token. Default
	// lease.DefaultRetention (24h); kept in whole milliseconds, rounded
	// up. A released or force-released record is given the retention as
	// its TTL, and so ends by itself; the record of a lease that simply
	// expired (its holder died) is removed by Sweep. A record is never
	// given a TTL while its lease is held.
	//
	// Removing a record does not let tokens go back: the next token of the
	// key is at least the server's clock in microseconds, above every
	// token issued more than the retention ago, unless the server's clock
	// stepped back by more than that. lease.KeepForever keeps every record
	// for good (one per key ever used), so that tokens rise even across a
	// larger backward step: choose it where the server's clock may step
	// back by more than a retention and the keys are few. Other negative
	// values are invalid.
	//
	// Upgrading from a version of this package without retention, keep
	// KeepForever until no process of the older version shares the
	// prefix: the older Acquire does not remove a released record's TTL,
	// so the record of a lease it holds could expire, or be evicted.
	Retention time.Duration
}

// Store is a lease.Backend on Valkey. It is safe for concurrent use. The
// zero value is not usable; call New.
type Store struct {
	client valkey.Client
	prefix string
	// retention is Options.Retention made explicit (lease.KeepForever or
	// positive); retentionArg is what the scripts get: whole
	// milliseconds, or "0" to keep records forever.
	retention    time.Duration
	retentionArg string

	mu      sync.Mutex
	watches map[string]*watch // by release channel; see watch.go
}

var (
	_ lease.Backend        = (*Store)(nil)
	_ lease.ReleaseWatcher = (*Store)(nil)
	_ lease.HandOffer      = (*Store)(nil)
	_ lease.ChangeWatcher  = (*Store)(nil)
)

// New returns a Store that keeps leases on the server (or cluster) behind
// client. It fails if client is nil or o is invalid; it does not talk to
// the server (see Check). The Store never closes client.
func New(client valkey.Client, o Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("leasevalkey: New: nil client")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		return nil, fmt.Errorf("leasevalkey: New: Prefix %q must not contain '{' or '}'", o.Prefix)
	}
	s := &Store{client: client, prefix: o.Prefix, retention: o.Retention, retentionArg: "0"}
	switch {
	case o.Retention == 0:
		s.retention = lease.DefaultRetention
	case o.Retention == lease.KeepForever:
		return s, nil
	case o.Retention < 0:
		return nil, fmt.Errorf("leasevalkey: New: Retention %v is negative (use lease.KeepForever to keep records forever)", o.Retention)
	}
	s.retentionArg = strconv.FormatInt(int64((s.retention+time.Millisecond-1)/time.Millisecond), 10)
	return s, nil
}

// Retention returns how long the Store keeps the record of a lease after
// the lease ended: Options.Retention, with the default filled in, or
// lease.KeepForever.
func (s *Store) Retention() time.Duration { return s.retention }

// Prefix returns the prefix of the Store's keys and channels.
func (s *Store) Prefix() string { return s.prefix }

// RecordKey returns the name of the hash that records key's lease. It is
// meant for operators and for scripts that guard writes (see Guard); the
// record's fields are described in the package documentation.
func (s *Store) RecordKey(key string) string { return recordKey(s.prefix, key) }

// HashTag returns the hash tag of key's record, braces included:
// RecordKey(key) starts with Prefix() + HashTag(key). Any name that
// carries it as its first '{…}' lives in the record's hash slot, so a
// script can touch that name and the record together, even on a cluster.
// If key holds a hash tag of its own (the bytes between its first '{' and
// the first '}' after it, if any), that is the record's, as it is: the
// record of "{acct}/17" is in the slot of the application's keys tagged
// {acct}. Otherwise the tag is the key, or for a permit's key the
// semaphore's key (see lease.PermitKey), with '%', '{', '}' and '/'
// escaped as %25, %7B, %7D and %2F; other bytes are kept, and escaping
// piece by piece gives the same result as escaping whole.
func (s *Store) HashTag(key string) string { return "{" + keyspace.RecordTag(key) + "}" }

// Guard returns the coordinates of the acquisition snap in this Store, for
// writes that must happen only while it is current. It fails if snap is
// not a valid snapshot.
func (s *Store) Guard(snap lease.Snapshot) (guard.Guard, error) {
	if !snap.Valid() {
		return guard.Guard{}, fmt.Errorf("leasevalkey: Guard: snapshot of key %q has no token", snap.Key)
	}
	return guard.New(guard.Valkey, recordKey(s.prefix, snap.Key), snap)
}

// micros returns d in whole microseconds, rounded up to whole milliseconds:
// the precision a TTL is kept in.
func micros(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(int64(ms)*1000, 10)
}

// validate checks the key before any I/O.
func validate(op, key string) error {
	if err := lease.ValidateKey(key); err != nil {
		return fmt.Errorf("leasevalkey: %s: %w", op, err)
	}
	return nil
}

// Acquire implements lease.Backend.
func (s *Store) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	const op = "acquire"
	if err := validate(op, r.Key); err != nil {
		return 0, err
	}
	if r.TTL <= 0 {
		return 0, fmt.Errorf("leasevalkey: %s: TTL %v is not positive", op, r.TTL)
	}
	if ctx.Err() != nil {
		return 0, beforeSend(ctx, op)
	}
	preferred := "0"
	if r.Preferred {
		preferred = "1"
	}
	rec := recordKey(s.prefix, r.Key)
	res := acquireScript.Exec(ctx, s.client,
		[]string{rec},
		[]string{r.Owner, r.Nonce, micros(r.TTL), preferred, releaseChannel(rec)})
	msg, err := res.ToMessage()
	if err != nil {
		return 0, classify(op, err)
	}
	if tok, err := msg.AsInt64(); err == nil {
		return lease.Token(tok), nil
	}
	// Held by another acquisition: {token, owner, remaining µs}; or
	// offered to others: {token, nil, remaining µs, candidates}.
	held, err := msg.ToArray()
	if err != nil || len(held) != 3 && len(held) != 4 {
		return 0, lease.Indeterminate(fmt.Errorf("leasevalkey: %s: unexpected reply %s", op, msg.String()))
	}
	tok, _ := held[0].AsInt64()
	owner, _ := held[1].ToString()
	left, _ := held[2].AsInt64()
	e := &lease.NotAcquiredError{Key: r.Key, Holder: owner, Token: lease.Token(tok), Remaining: time.Duration(left) * time.Microsecond}
	if len(held) == 4 {
		offer, _ := held[3].ToString()
		e.Holder, e.Candidates = "", splitCandidates(offer)
	}
	return 0, e
}

// HandOff implements lease.HandOffer in one script (lua/handoff.lua):
// if a is current, it ends it and offers the key to o.Candidates for
// o.Window with a new token, announced as a release is. The record keeps
// a's owner and nonce until a candidate (or anyone, once the window
// passed) acquires the key, so that a's Renew and Release get a
// *lease.LostError with Reason lease.HandedOff; it is given the window
// plus the retention as its TTL. A permit's key is refused before any
// I/O with an error matching errors.ErrUnsupported.
func (s *Store) HandOff(ctx context.Context, a lease.Acquisition, o lease.Offer) (lease.Token, error) {
	const op = "hand off"
	if err := validate(op, a.Key); err != nil {
		return 0, err
	}
	if keyspace.IsPermit(a.Key, "") {
		return 0, fmt.Errorf("leasevalkey: %s %q: %w: the key of a semaphore's permit cannot be handed off", op, a.Key, errors.ErrUnsupported)
	}
	if len(o.Candidates) == 0 || len(o.Candidates) > lease.MaxCandidates || o.Window <= 0 {
		return 0, fmt.Errorf("leasevalkey: %s %q: %w: %d candidates, window %v", op, a.Key, lease.ErrInvalidOffer, len(o.Candidates), o.Window)
	}
	for _, c := range o.Candidates {
		if err := lease.ValidateOwner(c); err != nil {
			return 0, fmt.Errorf("leasevalkey: %s %q: %w: candidate: %w", op, a.Key, lease.ErrInvalidOffer, err)
		}
	}
	if ctx.Err() != nil {
		return 0, beforeSend(ctx, op)
	}
	rec := recordKey(s.prefix, a.Key)
	vals, err := handOffScript.Exec(ctx, s.client,
		[]string{rec},
		[]string{a.Nonce, a.Token.String(), strings.Join(o.Candidates, "\n"), micros(o.Window), releaseChannel(rec), s.retentionArg}).ToArray()
	if err != nil {
		return 0, classify(op, err)
	}
	var n, tok int64
	if len(vals) == 2 {
		n, err = vals[0].AsInt64()
		if err == nil {
			tok, err = vals[1].AsInt64()
		}
	}
	switch {
	case len(vals) != 2 || err != nil:
		return 0, lease.Indeterminate(fmt.Errorf("leasevalkey: %s: unexpected reply of %d values", op, len(vals)))
	case n == outcomeDone && tok > 0:
		return lease.Token(tok), nil
	}
	if reason, ok := lostReasons[n]; ok {
		return 0, &lease.LostError{Key: a.Key, Token: a.Token, Reason: reason}
	}
	return 0, lease.Indeterminate(fmt.Errorf("leasevalkey: %s: unexpected outcome %d", op, n))
}

// splitCandidates splits the candidates of an offer as the scripts keep
// them, joined by "\n"; nil for none.
func splitCandidates(offer string) []string {
	if offer == "" {
		return nil
	}
	return strings.Split(offer, "\n")
}

// Renew implements lease.Backend.
func (s *Store) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	const op = "renew"
	if err := validate(op, a.Key); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("leasevalkey: %s: TTL %v is not positive", op, ttl)
	}
	if ctx.Err() != nil {
		return beforeSend(ctx, op)
	}
	res := renewScript.Exec(ctx, s.client,
		[]string{recordKey(s.prefix, a.Key)},
		[]string{a.Nonce, a.Token.String(), micros(ttl)})
	return outcome(op, a, res)
}

// Release implements lease.Backend.
func (s *Store) Release(ctx context.Context, a lease.Acquisition) error {
	const op = "release"
	if err := validate(op, a.Key); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return beforeSend(ctx, op)
	}
	rec := recordKey(s.prefix, a.Key)
	res := releaseScript.Exec(ctx, s.client,
		[]string{rec},
		[]string{a.Nonce, a.Token.String(), releaseChannel(rec), s.retentionArg})
	return outcome(op, a, res)
}

// outcome reads the reply of the renew and release scripts.
func outcome(op string, a lease.Acquisition, res valkey.ValkeyResult) error {
	n, err := res.AsInt64()
	if err != nil {
		return classify(op, err)
	}
	if n == outcomeDone {
		return nil
	}
	if reason, ok := lostReasons[n]; ok {
		return &lease.LostError{Key: a.Key, Token: a.Token, Reason: reason}
	}
	return lease.Indeterminate(fmt.Errorf("leasevalkey: %s: unexpected reply %d", op, n))
}

// Inspect implements lease.Backend.
func (s *Store) Inspect(ctx context.Context, key string) (lease.Record, error) {
	const op = "inspect"
	if err := validate(op, key); err != nil {
		return lease.Record{}, err
	}
	if ctx.Err() != nil {
		return lease.Record{}, beforeSend(ctx, op)
	}
	return inspectReply(key, inspectScript.Exec(ctx, s.client, []string{recordKey(s.prefix, key)}, nil))
}
