package leaseservice

import (
	"context"
	"sync"
	"time"

	"github.com/golib/lease/lease"
)

// tracked is the backend of a Service's own client: the caller's backend,
// recording when the campaign's backend call in flight (an acquire
// attempt or a release-watch setup) began, so that Check can tell a
// campaign that waits for the holder from one stuck in a backend call.
// The campaign makes these calls one at a time. It also keeps the
// acquisition of the last hand-off, so that the term can release it after
// a hand-off whose outcome is unknown (Handle.HandOff releases the handle
// locally either way).
type tracked struct {
	lease.Backend
	clock lease.Clock

	mu      sync.Mutex
	op      string    // the call in flight, or ""
	since   time.Time // when it began
	offered lease.Acquisition
}

// track returns b wrapped to record its campaign calls, still a
// lease.ReleaseWatcher and a lease.HandOffer if b is one.
func track(b lease.Backend, clock lease.Clock) (lease.Backend, *tracked) {
	t := &tracked{Backend: b, clock: clock}
	w, watches := b.(lease.ReleaseWatcher)
	ho, handsOff := b.(lease.HandOffer)
	switch {
	case watches && handsOff:
		return &trackedBoth{&trackedWatcher{t, w}, ho}, t
	case watches:
		return &trackedWatcher{t, w}, t
	case handsOff:
		return &trackedHandOffer{t, ho}, t
	}
	return t, t
}

func (t *tracked) begin(op string) {
	now := t.clock.Now()
	t.mu.Lock()
	t.op, t.since = op, now
	t.mu.Unlock()
}

func (t *tracked) end() {
	t.mu.Lock()
	t.op = ""
	t.mu.Unlock()
}

// inFlight returns the campaign's backend call in flight and when it
// began; op is "" if there is none.
func (t *tracked) inFlight() (op string, since time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.op, t.since
}

// lastOffered returns the acquisition of the last hand-off attempted.
func (t *tracked) lastOffered() lease.Acquisition {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.offered
}

func (t *tracked) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	t.begin("an acquire attempt")
	defer t.end()
	return t.Backend.Acquire(ctx, r)
}

type trackedWatcher struct {
	*tracked
	w lease.ReleaseWatcher
}

func (t *trackedWatcher) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	t.begin("a release-watch setup")
	defer t.end()
	return t.w.WatchReleases(ctx, key)
}

type trackedHandOffer struct {
	*tracked
	ho lease.HandOffer
}

func (t *trackedHandOffer) HandOff(ctx context.Context, a lease.Acquisition, o lease.Offer) (lease.Token, error) {
	return t.handOff(ctx, t.ho, a, o)
}

type trackedBoth struct {
	*trackedWatcher
	ho lease.HandOffer
}

func (t *trackedBoth) HandOff(ctx context.Context, a lease.Acquisition, o lease.Offer) (lease.Token, error) {
	return t.handOff(ctx, t.ho, a, o)
}

func (t *tracked) handOff(ctx context.Context, ho lease.HandOffer, a lease.Acquisition, o lease.Offer) (lease.Token, error) {
	t.mu.Lock()
	t.offered = a
	t.mu.Unlock()
	return ho.HandOff(ctx, a, o)
}
