package valkey

import (
	"context"
	"fmt"
	"time"

	"github.com/golib/lease/lease"
)

var _ lease.PermitAcquirer = (*Store)(nil)

// AcquirePermit implements lease.PermitAcquirer in one script
// (lua/acquire_permit.lua), one round trip. Permit i of the semaphore
// r.Key is the lease on lease.PermitKey(r.Key, i), recorded as any lease
// is; the records of a semaphore's permits share one hash slot (see the
// package documentation), so the script reads them all at once, also on
// a cluster, and grants the lowest free one.
//
// Tokens rise across the semaphore as a whole: the semaphore has a token
// key, in the permits' hash slot, that keeps the highest token
// AcquirePermit issued to any of its permits, so that a permit granted
// after the number of permits was lowered is still above the tokens of
// the permits beyond the new number. It is given the Store's retention as
// its TTL at each grant: once it ends, every token it kept was issued more
// than a retention ago, and the server's clock, which tokens never fall
// below, is above them (the rule that lets records end; see Tokens in the
// package documentation). A permit's key acquired with Acquire, rather
// than AcquirePermit, does not raise the token key.
func (s *Store) AcquirePermit(ctx context.Context, r lease.AcquireRequest, permits int) (int, lease.Token, error) {
	const op = "acquire permit"
	if err := validate(op, r.Key); err != nil {
		return 0, 0, err
	}
	if permits < 1 || permits > lease.MaxPermits {
		return 0, 0, fmt.Errorf("leasevalkey: %s %q: %d permits, want 1 to %d", op, r.Key, permits, lease.MaxPermits)
	}
	if err := lease.ValidateKey(lease.PermitKey(r.Key, permits-1)); err != nil {
		return 0, 0, fmt.Errorf("leasevalkey: %s: the key of permit %d: %w", op, permits-1, err)
	}
	if r.TTL <= 0 {
		return 0, 0, fmt.Errorf("leasevalkey: %s %q: TTL %v is not positive", op, r.Key, r.TTL)
	}
	if ctx.Err() != nil {
		return 0, 0, beforeSend(ctx, op)
	}
	keys := make([]string, permits+1)
	for i := range permits {
		keys[i] = recordKey(s.prefix, lease.PermitKey(r.Key, i))
	}
	keys[permits] = permitTokensKey(s.prefix, r.Key)
	vals, err := acquirePermitScript.Exec(ctx, s.client, keys, []string{r.Owner, r.Nonce, micros(r.TTL), s.retentionArg}).ToArray()
	if err != nil {
		return 0, 0, classify(op, err)
	}
	switch len(vals) {
	case 2: // granted: {slot, token}
		slot, err1 := vals[0].AsInt64()
		tok, err2 := vals[1].AsInt64()
		if err1 == nil && err2 == nil && 0 <= slot && slot < int64(permits) && tok > 0 {
			return int(slot), lease.Token(tok), nil
		}
	case 3: // every permit held: {token, owner, remaining µs} of the first to end
		tok, _ := vals[0].AsInt64()
		owner, _ := vals[1].ToString()
		left, _ := vals[2].AsInt64()
		return 0, 0, &lease.NotAcquiredError{Key: r.Key, Holder: owner, Token: lease.Token(tok), Remaining: time.Duration(left) * time.Microsecond}
	}
	return 0, 0, lease.Indeterminate(fmt.Errorf("leasevalkey: %s %q: unexpected reply of %d values", op, r.Key, len(vals)))
}
