package valkey

import (
	"context"
	"fmt"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/valkeyplumbing"
	"github.com/golib/lease/lease"
)

var _ lease.SetAcquirer = (*Store)(nil)

// setRecords returns the records of the keys of a set, in order, or an
// error naming op before any I/O: the set must hold 1 to
// lease.MaxSetKeys valid keys, sorted and without duplicates; on a
// cluster (the client's Mode is valkey.ClientModeCluster) their records
// must be in one hash slot, so that one script may touch them all.
func (s *Store) setRecords(op string, keys []string) ([]string, error) {
	if len(keys) < 1 || len(keys) > lease.MaxSetKeys {
		return nil, fmt.Errorf("leasevalkey: %s: %d keys, want 1 to %d", op, len(keys), lease.MaxSetKeys)
	}
	recs := make([]string, len(keys))
	for i, k := range keys {
		if err := validate(op, k); err != nil {
			return nil, err
		}
		if i > 0 && keys[i-1] >= k {
			return nil, fmt.Errorf("leasevalkey: %s: keys %q and %q are not sorted without duplicates", op, keys[i-1], k)
		}
		recs[i] = recordKey(s.prefix, k)
	}
	if s.client.Mode() != valkey.ClientModeCluster {
		return recs, nil
	}
	slot := valkeyplumbing.KeySlot(recs[0])
	for i, rec := range recs[1:] {
		if valkeyplumbing.KeySlot(rec) != slot {
			return nil, fmt.Errorf("leasevalkey: %s: %w: keys %q and %q are in different hash slots of the cluster; "+
				"give every key of the set one hash tag, the same text between '{' and '}', such as %q and %q",
				op, lease.ErrInvalidKey, keys[0], keys[i+1], "{acct}/17", "{acct}/42")
		}
	}
	return recs, nil
}

// AcquireSet implements lease.SetAcquirer in one script
// (lua/acquire_set.lua), one round trip: it reads the records of every
// key and, if none is held by another acquisition, grants them all with
// one token, above the last token of each. Each key's lease is recorded
// as any lease is. Nothing waits on a lock, so overlapping sets never
// deadlock: the server runs one script at a time, and each finds every
// key free or changes nothing.
//
// On a cluster the records of the keys must share a hash slot: the record
// of a key holding a hash tag is in the slot of its tag (see the package
// documentation), so give the keys of a set one tag, as in "{acct}/17" and
// "{acct}/42". A set across slots is refused before any I/O with an error
// matching lease.ErrInvalidKey. A standalone or sentinel server takes any
// set.
func (s *Store) AcquireSet(ctx context.Context, keys []string, r lease.AcquireRequest) (lease.Token, error) {
	const op = "acquire set"
	recs, err := s.setRecords(op, keys)
	if err != nil {
		return 0, err
	}
	if r.TTL <= 0 {
		return 0, fmt.Errorf("leasevalkey: %s: TTL %v is not positive", op, r.TTL)
	}
	if ctx.Err() != nil {
		return 0, beforeSend(ctx, op)
	}
	msg, err := acquireSetScript.Exec(ctx, s.client, recs, []string{r.Owner, r.Nonce, micros(r.TTL)}).ToMessage()
	if err != nil {
		return 0, classify(op, err)
	}
	if tok, err := msg.AsInt64(); err == nil {
		return lease.Token(tok), nil
	}
	// A key held by another acquisition: {index, token, owner, remaining µs}.
	held, err := msg.ToArray()
	if err == nil && len(held) == 4 {
		i, err := held[0].AsInt64()
		if err == nil && 1 <= i && i <= int64(len(keys)) {
			tok, _ := held[1].AsInt64()
			owner, _ := held[2].ToString()
			left, _ := held[3].AsInt64()
			return 0, &lease.NotAcquiredError{Key: keys[i-1], Holder: owner, Token: lease.Token(tok), Remaining: time.Duration(left) * time.Microsecond}
		}
	}
	return 0, lease.Indeterminate(fmt.Errorf("leasevalkey: %s: unexpected reply %s", op, msg.String()))
}

// RenewSet implements lease.SetAcquirer in one script
// (lua/renew_set.lua): all the leases or none are extended.
func (s *Store) RenewSet(ctx context.Context, keys []string, a lease.Acquisition, ttl time.Duration) error {
	const op = "renew set"
	recs, err := s.setRecords(op, keys)
	if err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("leasevalkey: %s: TTL %v is not positive", op, ttl)
	}
	if ctx.Err() != nil {
		return beforeSend(ctx, op)
	}
	return setOutcome(op, keys, a, renewSetScript.Exec(ctx, s.client, recs, []string{a.Nonce, a.Token.String(), micros(ttl)}))
}

// ReleaseSet implements lease.SetAcquirer in one script
// (lua/release_set.lua): each key the acquisition still holds is released
// as Release releases one, its record kept for the retention, and
// announced on its release channel, which wakes the waiters of that key
// (see WatchReleases).
func (s *Store) ReleaseSet(ctx context.Context, keys []string, a lease.Acquisition) error {
	const op = "release set"
	recs, err := s.setRecords(op, keys)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return beforeSend(ctx, op)
	}
	args := make([]string, 3, 3+len(recs))
	args[0], args[1], args[2] = a.Nonce, a.Token.String(), s.retentionArg
	for _, rec := range recs {
		args = append(args, releaseChannel(rec))
	}
	return setOutcome(op, keys, a, releaseSetScript.Exec(ctx, s.client, recs, args))
}

// setOutcome reads the reply of the renew and release scripts of sets:
// {outcome, index} of the first key the acquisition no longer held, or
// {1, 0}.
func setOutcome(op string, keys []string, a lease.Acquisition, res valkey.ValkeyResult) error {
	vals, err := res.ToArray()
	if err != nil {
		return classify(op, err)
	}
	if len(vals) == 2 {
		n, err1 := vals[0].AsInt64()
		i, err2 := vals[1].AsInt64()
		if err1 == nil && err2 == nil {
			if n == outcomeDone {
				return nil
			}
			if reason, ok := lostReasons[n]; ok && 1 <= i && i <= int64(len(keys)) {
				return &lease.LostError{Key: keys[i-1], Token: a.Token, Reason: reason}
			}
		}
	}
	return lease.Indeterminate(fmt.Errorf("leasevalkey: %s: unexpected reply of %d values", op, len(vals)))
}
