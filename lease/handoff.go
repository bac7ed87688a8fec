package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxCandidates is the most owners one Offer may name.
const MaxCandidates = 16

// HandOffer is an optional Backend capability, found by type assertion:
// it hands a lease over to a successor in one atomic operation.
//
// A HandOffer's Acquire honours a standing offer: while it stands, only an
// acquisition whose Owner is one of the offer's Candidates is granted the
// key, and the first one gets the offer's token; any other Acquire gets a
// *NotAcquiredError with the Candidates, the offered token and what is
// left of the window. Once the window has passed on the backend's clock,
// the key is free for anyone, and the next grant gets a token above the
// offered one. Its Inspect reports a standing offer (Record.Candidates)
// and a preferred candidate (Record.Preferred), and it honours
// AcquireRequest.Preferred.
//
// Hand-off is for single keys: a backend refuses it for a permit key and
// for a key held as part of a set.
type HandOffer interface {
	// HandOff ends acquisition a, if it is still current and not expired,
	// and in the same atomic operation offers the key to o.Candidates for
	// o.Window (on the backend's clock), with a new token strictly greater
	// than every token issued for the key before, which it returns. It
	// announces the change as Release does, so that a waiting Acquire of
	// a candidate is woken at once. If a is not current it returns a
	// *LostError as Renew does, and changes nothing. The client validates
	// o (see Offer) and always passes a's token.
	HandOff(ctx context.Context, a Acquisition, o Offer) (Token, error)
}

// Offer is what Handle.HandOff offers a key to.
type Offer struct {
	// Candidates are the owner strings (ClientOptions.Owner) that may take
	// the key: the first of them to acquire it gets it. One to
	// MaxCandidates valid owner strings.
	Candidates []string
	// Window is how long the offer stands, on the backend's clock: if no
	// candidate acquired the key by then, it is free for anyone. Default
	// (zero) the handle's policy TTL; at most the policy TTL.
	Window time.Duration
}

// Ending says how the last acquisition of a key ended (Record.Ending).
type Ending uint8

const (
	// EndUnknown: the key is held, was never acquired, or the backend
	// cannot tell.
	EndUnknown Ending = iota
	// EndReleased: its holder released it.
	EndReleased
	// EndExpired: its TTL passed, or a hand-off's offer lapsed with no
	// candidate taking it.
	EndExpired
	// EndForceReleased: an operator ended it with a ForceReleaser.
	EndForceReleased
	// EndHandedOff: its holder handed it off (HandOffer); the offer may
	// still stand (Record.Candidates).
	EndHandedOff
)

// String returns "unknown", "released", "expired", "force-released" or
// "handed off".
func (e Ending) String() string {
	switch e {
	case EndUnknown:
		return "unknown"
	case EndReleased:
		return "released"
	case EndExpired:
		return "expired"
	case EndForceReleased:
		return "force-released"
	case EndHandedOff:
		return "handed off"
	}
	return "Ending(" + strconv.Itoa(int(e)) + ")"
}

// validateOffer checks o for a handle whose policy TTL is ttl and returns
// it with its defaults.
func validateOffer(o Offer, ttl time.Duration) (Offer, error) {
	if len(o.Candidates) == 0 {
		return o, errors.New("an offer needs at least one candidate")
	}
	if len(o.Candidates) > MaxCandidates {
		return o, fmt.Errorf("%d candidates, more than the limit of %d", len(o.Candidates), MaxCandidates)
	}
	for _, c := range o.Candidates {
		if err := ValidateOwner(c); err != nil {
			return o, fmt.Errorf("candidate: %w", err)
		}
	}
	switch {
	case o.Window == 0:
		o.Window = ttl
	case o.Window < time.Millisecond:
		return o, fmt.Errorf("offer window %v: must be at least 1ms", o.Window)
	case o.Window > ttl:
		return o, fmt.Errorf("offer window %v: longer than the policy TTL %v", o.Window, ttl)
	}
	return o, nil
}

// HandOff hands this lease over to one of o.Candidates in one atomic
// operation on the backend (a HandOffer): this acquisition ends, and the
// key is offered to the candidates for o.Window, with a new, higher token.
// The first candidate to acquire it within the window gets it (a candidate
// waiting in Acquire is woken at once by the backend's notification);
// after the window, anyone may. Writes under this handle's token are
// refused by every fence once a successor wrote with its higher token.
//
// Stop the work the lease protects before handing it off: the hand-off is
// the end of this acquisition, as Release is. A running Managed renewer
// stops; if the hand-off succeeds it reports the loss, with Reason
// HandedOff (Lost closes, Err returns it, a Lost event is emitted), since
// the lease is gone while the renewer still vouched for it. After Stop it
// reports nothing more.
//
// It returns nil if the backend handed the lease off; an error matching
// ErrInvalidOffer for a bad o, before anything is sent (the handle stays
// usable); one matching ErrLost if the acquisition was already gone; one
// matching ErrIndeterminate if the outcome is unknown (the lease is then
// handed off, or held until its TTL passes); one matching
// errors.ErrUnsupported if the backend is not a HandOffer or the handle
// is a permit or a set; or another backend error, after which the lease
// stays held until its TTL passes. Except after ErrInvalidOffer and
// errors.ErrUnsupported, which send nothing and leave the handle usable
// (Release it), the handle is released locally either way. Successful hand-offs are observed as a
// Released event. Errors read lease: hand off "key": <cause>.
func (h *Handle) HandOff(ctx context.Context, o Offer) error {
	ho, ok := h.c.b.(HandOffer)
	if !ok || h.keys != nil || h.sem != "" {
		if !ok {
			return h.wrap("hand off", unsupported(h.c.b, "lease.HandOffer", "hand-off"))
		}
		return h.wrap("hand off", Misconfigured(fmt.Errorf("%w: a permit or a set cannot be handed off", errors.ErrUnsupported)))
	}
	o, err := validateOffer(o, h.policy.o.TTL)
	if err != nil {
		return h.wrap("hand off", fmt.Errorf("%w: %w", ErrInvalidOffer, err))
	}
	h.mu.Lock()
	already := h.released
	h.released = true
	m := h.managed
	running := m != nil && m.ctx.Err() == nil
	if m != nil {
		m.cancel(ErrReleased) // no renewal from here on, as for Release
	}
	h.mu.Unlock()
	if already {
		return h.wrap("hand off", h.releasedError())
	}
	err = h.end(ctx, "hand off", func(ctx context.Context) error {
		_, err := ho.HandOff(ctx, h.acquisition(), o)
		return err
	})
	if err == nil && running {
		<-m.done
		m.lose(&LostError{Key: h.key, Token: h.token, Reason: HandedOff})
	}
	return err
}

// quoteList quotes each of s and joins them with ", ".
func quoteList(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}
