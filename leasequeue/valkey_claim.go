package leasequeue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// claimReady implements Source in one script (see lua/claim.lua).
func (s *ValkeySource) claimReady(ctx context.Context, r claimReq, n int) ([]grant, error) {
	if n <= 0 {
		return nil, nil
	}
	if err := checkRequest(r); err != nil {
		return nil, err
	}
	arr, err := s.claim(ctx, r, "next", strconv.Itoa(n))
	if err != nil {
		return nil, valkeyError("claim from", s.queue, err)
	}
	if len(arr)%4 != 0 {
		return nil, lease.Indeterminate(fmt.Errorf("leasequeue: valkey: claim from %q: unexpected reply of %d values", s.queue, len(arr)))
	}
	gs := make([]grant, 0, len(arr)/4)
	for i := 0; i < len(arr); i += 4 {
		id, err := arr[i].ToString()
		if err != nil {
			return nil, lease.Indeterminate(fmt.Errorf("leasequeue: valkey: claim from %q: unexpected reply: %w", s.queue, err))
		}
		g, err := granted(id, arr[i+1:i+4])
		if err != nil {
			return nil, err
		}
		gs = append(gs, g)
	}
	return gs, nil
}

// claimID implements Source in one script (see lua/claim.lua).
func (s *ValkeySource) claimID(ctx context.Context, r claimReq, id string) (grant, error) {
	res, err := s.resource(id)
	if err != nil {
		return grant{}, err
	}
	if err := checkRequest(r); err != nil {
		return grant{}, err
	}
	arr, err := s.claim(ctx, r, "item", id)
	if err != nil {
		return grant{}, valkeyError("claim", id, err)
	}
	verdict := ""
	if len(arr) > 0 {
		verdict, _ = arr[0].ToString()
	}
	switch {
	case verdict == "ok" && len(arr) == 4:
		return granted(id, arr[1:])
	case verdict == "held" && len(arr) == 4:
		owner, _ := arr[1].ToString()
		tok, _ := arr[2].ToString()
		t, _ := strconv.ParseUint(tok, 10, 64)
		left, _ := arr[3].AsInt64()
		return grant{}, &lease.NotAcquiredError{Key: r.KeyPrefix + escapeID(id), Holder: owner, Token: lease.Token(t), Remaining: time.Duration(left) * time.Microsecond}
	case verdict == "implausible" && len(arr) == 3:
		tok, _ := arr[1].ToString()
		t, _ := strconv.ParseUint(tok, 10, 64)
		l, _ := arr[2].ToString()
		largest, err := strconv.ParseUint(l, 10, 64)
		if err != nil {
			break
		}
		return grant{}, &fence.ImplausibleTokenError{Resource: res, Key: r.KeyPrefix + escapeID(id), Token: lease.Token(t), Largest: lease.Token(largest)}
	case verdict == "state" && len(arr) == 2:
		state, _ := arr[1].ToString()
		return grant{}, finished(id, State(state))
	case verdict == "none":
		return grant{}, notFound(id)
	}
	return grant{}, lease.Indeterminate(fmt.Errorf("leasequeue: valkey: claim %q: unexpected reply %v", id, arr))
}

// checkRequest refuses a request without a secret: the scripts read an
// empty one as a released claim.
func checkRequest(r claimReq) error {
	if r.Nonce == "" {
		return errors.New("leasequeue: valkey: claim request without a Nonce")
	}
	return nil
}

// claim runs the claim script in mode with its argument.
func (s *ValkeySource) claim(ctx context.Context, r claimReq, mode, arg string) ([]valkey.ValkeyMessage, error) {
	arr, err := s.scripts.claim.Exec(ctx, s.client, []string{s.ready, s.due, s.since, s.done},
		[]string{s.items, r.KeyPrefix, r.Owner, r.Nonce, strconv.FormatInt(millis(r.TTL), 10), mode, arg}).ToArray()
	if valkey.IsValkeyNil(err) {
		return nil, nil
	}
	return arr, err
}

// granted reads the token (a decimal string), attempt and age (ms, or -1)
// of a claim of id.
func granted(id string, m []valkey.ValkeyMessage) (grant, error) {
	s, err1 := m[0].ToString()
	tok, err := strconv.ParseUint(s, 10, 64)
	attempt, err2 := m[1].AsInt64()
	age, err3 := m[2].AsInt64()
	if err1 != nil || err != nil || err2 != nil || err3 != nil || tok == 0 {
		return grant{}, lease.Indeterminate(fmt.Errorf("leasequeue: valkey: claim %q: unexpected reply", id))
	}
	g := grant{ID: id, Token: lease.Token(tok), begun: begun{Attempt: int(attempt)}}
	if age > 0 {
		g.Age = time.Duration(age) * time.Millisecond
	}
	return g, nil
}

// renewClaim implements Source in one script (see lua/claimop.lua).
func (s *ValkeySource) renewClaim(ctx context.Context, id string, a lease.Acquisition, ttl time.Duration) error {
	return s.claimOp(ctx, id, a, "renew", ttl)
}

// releaseClaim implements Source in one script (see lua/claimop.lua).
func (s *ValkeySource) releaseClaim(ctx context.Context, id string, a lease.Acquisition) error {
	return s.claimOp(ctx, id, a, "release", 0)
}

// claimOp renews or releases the claim a of item id.
func (s *ValkeySource) claimOp(ctx context.Context, id string, a lease.Acquisition, op string, ttl time.Duration) error {
	if _, err := s.resource(id); err != nil {
		return err
	}
	arr, err := claimOpScript.Exec(ctx, s.client, []string{s.ItemKey(id, "item"), s.ItemKey(id, "fence"), s.due},
		[]string{id, a.Token.String(), a.Nonce, op, strconv.FormatInt(millis(ttl), 10)}).ToArray()
	if err != nil {
		return valkeyError(op+" claim of", id, err)
	}
	if len(arr) == 0 {
		return lease.Indeterminate(fmt.Errorf("leasequeue: valkey: %s claim of %q: unexpected reply %v", op, id, arr))
	}
	if ok, _ := arr[0].AsInt64(); ok == 1 {
		return nil
	}
	reason := lease.Expired
	if len(arr) == 2 {
		tok, _ := arr[1].ToString()
		if t, err := strconv.ParseUint(tok, 10, 64); err == nil && a.Token != 0 && lease.Token(t) > a.Token {
			reason = lease.Superseded
		}
	}
	return &lease.LostError{Key: a.Key, Token: a.Token, Reason: reason}
}

// inspectClaim implements Source in one read-only script (see
// lua/inspect.lua). The Record's Key is left empty.
func (s *ValkeySource) inspectClaim(ctx context.Context, id string) (lease.Record, error) {
	if _, err := s.resource(id); err != nil {
		return lease.Record{}, err
	}
	arr, err := inspectScript.Exec(ctx, s.client, []string{s.ItemKey(id, "item"), s.ItemKey(id, "fence")}, nil).ToArray()
	if err != nil {
		return lease.Record{}, valkeyError("inspect claim of", id, err)
	}
	if len(arr) < 2 {
		return lease.Record{}, fmt.Errorf("leasequeue: valkey: inspect claim of %q: unexpected reply %v", id, arr)
	}
	tok, _ := arr[0].ToString()
	t, _ := strconv.ParseUint(tok, 10, 64)
	rec := lease.Record{Token: lease.Token(t)}
	if held, _ := arr[1].AsInt64(); held == 1 && len(arr) == 4 {
		rec.Held = true
		rec.Owner, _ = arr[2].ToString()
		left, _ := arr[3].AsInt64()
		rec.Remaining = time.Duration(left) * time.Microsecond
	}
	return rec, nil
}
