package postgres

import (
	"context"
	"fmt"

	"github.com/golib/lease/lease"
)

// HandOff implements lease.HandOffer in one statement
// (queries/handoff.sql): if acquisition a still holds the key, it gets a
// new token, above every token issued for the key, and becomes an offer to
// o.Candidates until o.Window from now on the database's clock, which
// nobody holds. Acquire then grants the key only to a candidate, with that
// token, until the window passed; after it, to anyone, with a higher
// token. The offer notifies waiters as Release does, so that a
// candidate's waiting Acquire is woken at once. a's later Renew and
// Release get a *lease.LostError with Reason lease.HandedOff (Superseded
// once someone acquired the key); a Release by nonce alone (token 0)
// never ends or alters the offer, and ForceRelease ends it.
//
// The row of a standing or lapsed offer is kept as that of an ended
// lease: Sweep removes it a retention after the window passed. A
// permit key (lease.PermitKey) or a key held by a set cannot be handed
// off: the client refuses it.
//
// If a no longer holds the key it returns a *lease.LostError as Renew
// does and changes nothing. A lost reply is indeterminate
// (lease.ErrIndeterminate), as for Release.
func (s *Store) HandOff(ctx context.Context, a lease.Acquisition, o lease.Offer) (lease.Token, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("leasepostgres: hand off %q: %w: %s", a.Key, lease.ErrInvalidOffer, fmt.Sprintf(format, args...))
	}
	switch {
	case len(o.Candidates) == 0:
		return 0, bad("no candidates")
	case len(o.Candidates) > lease.MaxCandidates:
		return 0, bad("%d candidates, more than %d", len(o.Candidates), lease.MaxCandidates)
	case o.Window <= 0:
		return 0, bad("window %v is not positive", o.Window)
	}
	for _, c := range o.Candidates {
		if err := lease.ValidateOwner(c); err != nil { // acquire.sql joins them by a control character
			return 0, bad("candidate: %v", err)
		}
	}
	var (
		outcome int32
		token   int64
	)
	dest := []any{&outcome, &token, nil}
	ok, err := s.queryRow(ctx, s.q.handOff,
		[]any{a.Key, a.Nonce, int64(a.Token), o.Candidates, ttlInterval(o.Window), s.channel},
		dest[:2+s.q.extra]...)
	if err != nil {
		return 0, err
	}
	if !ok { // the key has no row
		outcome = outcomeNoRow
	}
	if err := lost(a, outcome); err != nil {
		return 0, err
	}
	if token <= 0 {
		return 0, fmt.Errorf("leasepostgres: hand off: table %s returned token %d", s.names.qualified, token)
	}
	return lease.Token(token), nil
}
