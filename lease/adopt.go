package lease

import (
	"errors"
	"fmt"
	"time"
)

// Adopt returns a Handle for acquisition a of c's backend that was granted
// by a request other than c's own Acquire: for example a work queue whose
// claim statement grants the lease of the item it claims (see package
// leasequeue). From then on the Handle is like one Acquire returned: Renew,
// Validate, Release and StartManaged work on c's backend under a.
//
// sent is when the request that granted a was sent, on c's clock (read it
// before sending); the Handle's local deadline is sent + p's
// LocalLifetime, as for Acquire. The grant must have been for p's TTL, on
// the backend's clock.
//
// a must name c's owner, a valid key, a nonce and a non-zero token, and p
// must not be the zero Policy; otherwise Adopt returns no Handle and an
// error matching ErrInvalidKey, ErrInvalidOwner (also when a.Owner is not
// c's) or ErrInvalidPolicy, or one saying what is missing. If the local
// deadline has already passed it returns a *LostError with Reason
// DeadlinePassed. Adopt does no I/O and emits no event. It is safe
// for concurrent use.
func (c *Client) Adopt(a Acquisition, p Policy, sent time.Time) (*Handle, error) {
	if err := ValidateKey(a.Key); err != nil {
		return nil, wrapOp("adopt", "", err)
	}
	switch {
	case !p.valid():
		return nil, wrapOp("adopt", a.Key, fmt.Errorf("%w: the zero Policy; build one with NewPolicy", ErrInvalidPolicy))
	case a.Owner != c.owner:
		return nil, wrapOp("adopt", a.Key, fmt.Errorf("%w: the acquisition's owner %q is not the client's", ErrInvalidOwner, a.Owner))
	case a.Nonce == "":
		return nil, wrapOp("adopt", a.Key, errors.New("acquisition without a nonce"))
	case a.Token == 0:
		return nil, wrapOp("adopt", a.Key, errors.New("acquisition without a token"))
	}
	deadline := sent.Add(p.LocalLifetime())
	if !c.clock.Now().Before(deadline) {
		return nil, wrapOp("adopt", a.Key, &LostError{Key: a.Key, Token: a.Token, Reason: DeadlinePassed})
	}
	return &Handle{c: c, key: a.Key, nonce: a.Nonce, token: a.Token, policy: p, deadline: deadline}, nil
}
