package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golib/lease/lease"
)

// RecordingBackend is a lease.Backend that records every Acquire, Renew and
// Release call of the backend it wraps, on the lane found in the call's
// context (see WithLane) or else on a fallback lane. Inspect is passed
// through unrecorded.
type RecordingBackend struct {
	b        lease.Backend
	rec      *Recorder
	fallback *Lane
}

var (
	_ lease.Backend        = (*RecordingBackend)(nil)
	_ lease.ReleaseWatcher = (*RecordingBackend)(nil)
	_ lease.PermitAcquirer = (*RecordingBackend)(nil)
	_ lease.SetAcquirer    = (*RecordingBackend)(nil)
	_ lease.HandOffer      = (*RecordingBackend)(nil)
	_ lease.ChangeWatcher  = (*RecordingBackend)(nil)
)

// NewRecordingBackend returns b recording into rec.
func NewRecordingBackend(b lease.Backend, rec *Recorder, fallback *Lane) *RecordingBackend {
	return &RecordingBackend{b: b, rec: rec, fallback: fallback}
}

// AcqID returns the id of an acquisition in histories: a digest of its
// secret, which never appears in a history itself.
func AcqID(nonce string) string {
	if nonce == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(nonce))
	return hex.EncodeToString(sum[:5])
}

// outcomeOf classifies an error by the rules of lease.Backend.
func outcomeOf(err error) (Outcome, uint64) {
	var na *lease.NotAcquiredError
	var lost *lease.LostError
	switch {
	case err == nil:
		return OK, 0
	case errors.As(err, &na):
		return NotAcquired, uint64(na.Token)
	case errors.As(err, &lost):
		return Lost, 0
	case errors.Is(err, lease.ErrIndeterminate):
		return Unknown, 0
	}
	return Failed, 0
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Acquire implements lease.Backend.
func (r *RecordingBackend) Acquire(ctx context.Context, req lease.AcquireRequest) (lease.Token, error) {
	lane := laneOf(ctx, r.fallback)
	op := Op{Lane: lane.ID(), Kind: KindAcquire, Key: req.Key, Owner: req.Owner, Acq: AcqID(req.Nonce), TTL: micros(req.TTL),
		Preferred: req.Preferred, Call: r.rec.Now()}
	tok, err := r.b.Acquire(ctx, req)
	op.Return = r.rec.Now()
	op.Outcome, op.Out = outcomeOf(err)
	op.Err = errText(err)
	var na *lease.NotAcquiredError
	if errors.As(err, &na) {
		op.Holder = na.Holder
	}
	if err == nil {
		op.Token = uint64(tok)
	}
	lane.record(r.rec, op)
	return tok, err
}

// Renew implements lease.Backend.
func (r *RecordingBackend) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	lane := laneOf(ctx, r.fallback)
	op := Op{Lane: lane.ID(), Kind: KindRenew, Key: a.Key, Sem: SemaphoreOf(a.Key), Acq: AcqID(a.Nonce), Token: uint64(a.Token), TTL: micros(ttl), Call: r.rec.Now()}
	err := r.b.Renew(ctx, a, ttl)
	op.Return = r.rec.Now()
	op.Outcome, _ = outcomeOf(err)
	op.Err = errText(err)
	lane.record(r.rec, op)
	return err
}

// Release implements lease.Backend.
func (r *RecordingBackend) Release(ctx context.Context, a lease.Acquisition) error {
	lane := laneOf(ctx, r.fallback)
	op := Op{Lane: lane.ID(), Kind: KindRelease, Key: a.Key, Sem: SemaphoreOf(a.Key), Acq: AcqID(a.Nonce), Token: uint64(a.Token), Call: r.rec.Now()}
	err := r.b.Release(ctx, a)
	op.Return = r.rec.Now()
	op.Outcome, _ = outcomeOf(err)
	op.Err = errText(err)
	lane.record(r.rec, op)
	return err
}

// Inspect implements lease.Backend; it is not recorded.
func (r *RecordingBackend) Inspect(ctx context.Context, key string) (lease.Record, error) {
	return r.b.Inspect(ctx, key)
}

// WatchReleases implements lease.ReleaseWatcher when the wrapped backend
// does; otherwise it fails, and the client polls.
func (r *RecordingBackend) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if w, ok := r.b.(lease.ReleaseWatcher); ok {
		return w.WatchReleases(ctx, key)
	}
	return nil, nil, errors.New("chaos: the backend does not watch releases")
}

// HandOff records a call of the wrapped backend's lease.HandOffer, which
// it must implement, as a KindHandOff.
func (r *RecordingBackend) HandOff(ctx context.Context, a lease.Acquisition, o lease.Offer) (lease.Token, error) {
	ho, ok := r.b.(lease.HandOffer)
	if !ok {
		return 0, lease.Misconfigured(fmt.Errorf("%w: chaos: backend %T does not implement lease.HandOffer", errors.ErrUnsupported, r.b))
	}
	lane := laneOf(ctx, r.fallback)
	op := Op{Lane: lane.ID(), Kind: KindHandOff, Key: a.Key, Owner: a.Owner, Acq: AcqID(a.Nonce), Token: uint64(a.Token),
		Candidates: slices.Clone(o.Candidates), TTL: micros(o.Window), Call: r.rec.Now()}
	tok, err := ho.HandOff(ctx, a, o)
	op.Return = r.rec.Now()
	op.Outcome, _ = outcomeOf(err)
	op.Err = errText(err)
	if err == nil {
		op.Out = uint64(tok)
	}
	lane.record(r.rec, op)
	return tok, err
}

// WatchChanges implements lease.ChangeWatcher when the wrapped backend
// does; otherwise it fails, and an observer polls.
func (r *RecordingBackend) WatchChanges(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return watchChanges(ctx, r.b, key)
}

// watchChanges calls b's WatchChanges, or fails if b has none.
func watchChanges(ctx context.Context, b lease.Backend, key string) (<-chan struct{}, func(), error) {
	if w, ok := b.(lease.ChangeWatcher); ok {
		return w.WatchChanges(ctx, key)
	}
	return nil, nil, errors.New("chaos: the backend does not watch changes")
}

// ForceRelease records a call of the wrapped backend's
// lease.ForceReleaser, which it must implement.
func (r *RecordingBackend) ForceRelease(ctx context.Context, key string, token lease.Token) (lease.Record, error) {
	f, ok := r.b.(lease.ForceReleaser)
	if !ok {
		return lease.Record{}, errors.New("chaos: the backend does not force releases")
	}
	lane := laneOf(ctx, r.fallback)
	op := Op{Lane: lane.ID(), Kind: KindForceRelease, Key: key, Sem: SemaphoreOf(key), Token: uint64(token), Call: r.rec.Now()}
	prev, err := f.ForceRelease(ctx, key, token)
	op.Return = r.rec.Now()
	op.Outcome, _ = outcomeOf(err)
	op.Err = errText(err)
	if err == nil && prev.Held {
		op.Out, op.Holder = uint64(prev.Token), prev.Owner
	}
	lane.record(r.rec, op)
	return prev, err
}

// AcquirePermit implements lease.PermitAcquirer by calling the wrapped
// backend's, which it must implement. It is recorded as a KindAcquire
// with Sem and Permits set, on the permit key granted (Key), or on the
// semaphore's key when the outcome names no permit.
func (r *RecordingBackend) AcquirePermit(ctx context.Context, req lease.AcquireRequest, permits int) (int, lease.Token, error) {
	pa, ok := r.b.(lease.PermitAcquirer)
	if !ok {
		return 0, 0, lease.Misconfigured(fmt.Errorf("%w: chaos: backend %T does not implement lease.PermitAcquirer", errors.ErrUnsupported, r.b))
	}
	lane := laneOf(ctx, r.fallback)
	op := Op{Lane: lane.ID(), Kind: KindAcquire, Key: req.Key, Sem: req.Key, Permits: permits, Owner: req.Owner,
		Acq: AcqID(req.Nonce), TTL: micros(req.TTL), Call: r.rec.Now()}
	slot, tok, err := pa.AcquirePermit(ctx, req, permits)
	op.Return = r.rec.Now()
	op.Outcome, op.Out = outcomeOf(err)
	op.Err = errText(err)
	var na *lease.NotAcquiredError
	if errors.As(err, &na) {
		op.Holder = na.Holder
	}
	if err == nil {
		op.Key, op.Token = lease.PermitKey(req.Key, slot), uint64(tok)
	}
	lane.record(r.rec, op)
	return slot, tok, err
}

// setAcquirer returns the wrapped backend's lease.SetAcquirer, or an
// error if it has none.
func (r *RecordingBackend) setAcquirer() (lease.SetAcquirer, error) {
	sa, ok := r.b.(lease.SetAcquirer)
	if !ok {
		return nil, lease.Misconfigured(fmt.Errorf("%w: chaos: backend %T does not implement lease.SetAcquirer", errors.ErrUnsupported, r.b))
	}
	return sa, nil
}

// setOp returns the operation recording a call on the set keys: Key their
// joined names, Keys a copy of them.
func setOp(lane *Lane, kind Kind, keys []string, a lease.Acquisition) Op {
	return Op{Lane: lane.ID(), Kind: kind, Key: strings.Join(keys, ","), Keys: slices.Clone(keys), Owner: a.Owner,
		Acq: AcqID(a.Nonce), Token: uint64(a.Token)}
}

// memberOf returns the key that err, an answer about a set, names.
func memberOf(err error) string {
	var na *lease.NotAcquiredError
	var lost *lease.LostError
	switch {
	case errors.As(err, &na):
		return na.Key
	case errors.As(err, &lost):
		return lost.Key
	}
	return ""
}

// AcquireSet implements lease.SetAcquirer by calling the wrapped
// backend's, which it must implement. It is recorded as one KindAcquire
// with Keys set (see Expand).
func (r *RecordingBackend) AcquireSet(ctx context.Context, keys []string, req lease.AcquireRequest) (lease.Token, error) {
	sa, err := r.setAcquirer()
	if err != nil {
		return 0, err
	}
	lane := laneOf(ctx, r.fallback)
	op := setOp(lane, KindAcquire, keys, lease.Acquisition{Owner: req.Owner, Nonce: req.Nonce})
	op.TTL, op.Call = micros(req.TTL), r.rec.Now()
	tok, err := sa.AcquireSet(ctx, keys, req)
	op.Return = r.rec.Now()
	op.Outcome, op.Out = outcomeOf(err)
	op.Err, op.Member = errText(err), memberOf(err)
	var na *lease.NotAcquiredError
	if errors.As(err, &na) {
		op.Holder = na.Holder
	}
	if err == nil {
		op.Token = uint64(tok)
	}
	lane.record(r.rec, op)
	return tok, err
}

// RenewSet implements lease.SetAcquirer; see AcquireSet.
func (r *RecordingBackend) RenewSet(ctx context.Context, keys []string, a lease.Acquisition, ttl time.Duration) error {
	sa, err := r.setAcquirer()
	if err != nil {
		return err
	}
	lane := laneOf(ctx, r.fallback)
	op := setOp(lane, KindRenew, keys, a)
	op.TTL, op.Call = micros(ttl), r.rec.Now()
	err = sa.RenewSet(ctx, keys, a, ttl)
	op.Return = r.rec.Now()
	op.Outcome, _ = outcomeOf(err)
	op.Err, op.Member = errText(err), memberOf(err)
	lane.record(r.rec, op)
	return err
}

// ReleaseSet implements lease.SetAcquirer; see AcquireSet.
func (r *RecordingBackend) ReleaseSet(ctx context.Context, keys []string, a lease.Acquisition) error {
	sa, err := r.setAcquirer()
	if err != nil {
		return err
	}
	lane := laneOf(ctx, r.fallback)
	op := setOp(lane, KindRelease, keys, a)
	op.Call = r.rec.Now()
	err = sa.ReleaseSet(ctx, keys, a)
	op.Return = r.rec.Now()
	op.Outcome, _ = outcomeOf(err)
	op.Err, op.Member = errText(err), memberOf(err)
	lane.record(r.rec, op)
	return err
}

// SemaphoreOf returns the semaphore's key of a permit key
// (lease.PermitKey), or "" if key is not of that form.
func SemaphoreOf(key string) string {
	sem, _, _ := lease.ParsePermitKey(key)
	return sem
}

// micros returns d in whole microseconds, rounded down.
func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }
