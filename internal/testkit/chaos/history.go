package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Kind names what an operation did.
type Kind string

// The kinds of operations in a history.
const (
	// KindAcquire is one Backend.Acquire call: one attempt of Client.Acquire.
	KindAcquire Kind = "acquire"
	// KindRenew is one Backend.Renew call.
	KindRenew Kind = "renew"
	// KindRelease is one Backend.Release call.
	KindRelease Kind = "release"
	// KindForceRelease is one ForceReleaser.ForceRelease call: Token is the
	// token asked for (0: whichever acquisition holds the key), Out the
	// token of the holder it reported ending (0: none).
	KindForceRelease Kind = "force-release"
	// KindWrite is one fenced write of a value to a resource; with Claim
	// set it advances the fence and writes nothing else.
	KindWrite Kind = "write"
	// KindRead reads a resource's fence mark and value in one atomic step.
	KindRead Kind = "read"
	// KindClock is a step of the backend's fake clock; it is drawn in the
	// visualisation only.
	KindClock Kind = "clock"
	// KindClient is one Client.Acquire call as its caller saw it: Owner
	// names the call (every call has an owner of its own), Outcome is OK,
	// Unknown (the error matches lease.ErrIndeterminate) or Failed (any
	// other error, which promises that no grant exists or can still
	// appear for the call). checkClientOutcomes holds it to that promise;
	// the model ignores it.
	KindClient Kind = "client-acquire"
	// KindEvent is something a client observed, such as a loss reported
	// by Managed (Err holds it); it is drawn in the visualisation only.
	KindEvent Kind = "event"
	// KindFault is a fault injected by the nemesis, from its start (Call)
	// to its end (Return). Only a fault with LostData or EndsLeases takes
	// part in the model; the others are drawn in the visualisation.
	KindFault Kind = "fault"
	// KindReplicated says that a replica of the store had every write the
	// primary had acknowledged when the operation was called: the nemesis
	// read the primary's log position just after Call and returned once the
	// replica had replayed up to it. A later fault with LostFences can take
	// each resource back to a state it had since then, not before.
	KindReplicated Kind = "replicated"
	// KindHandOff is one HandOffer.HandOff call: Acq and Token name the
	// acquisition handed off, Candidates the owners it was offered to,
	// TTL the offer's window (µs), and Out the offered token when OK.
	KindHandOff Kind = "hand-off"
	// KindObserve is one state a Client.Observe sequence reported: Held,
	// Owner, Out (the record's token), Candidates and Change are the
	// Observation's, and Call and Return bracket the read (the backend's
	// Inspect) that produced it. Outcome is OK, or Failed for a read that
	// failed (Err).
	KindObserve Kind = "observe"
)

// Outcome is what an operation returned.
type Outcome string

// The outcomes of operations.
const (
	// OK: applied (granted, renewed, released, written, read).
	OK Outcome = "ok"
	// NotAcquired: Acquire was refused because another acquisition holds
	// the key; Out holds the holder's token when the backend said it.
	NotAcquired Outcome = "not-acquired"
	// Lost: Renew or Release was refused because the acquisition is no
	// longer current.
	Lost Outcome = "lost"
	// Stale: the fence refused the write; Out holds the fence's mark.
	Stale Outcome = "stale"
	// Unknown: the request may or may not have been applied.
	Unknown Outcome = "unknown"
	// Failed: the request provably was not applied.
	Failed Outcome = "failed"
)

// Op is one recorded operation.
type Op struct {
	// Lane is the id of the client lane that issued the operation, such as
	// "p/3" (a goroutine of the test process) or "c1/2" (child process 1).
	Lane string `json:"lane"`
	Kind Kind   `json:"kind"`

	// Key is the lease key (lease operations and writes). For an operation
	// on a set of keys it is their names joined by "," (see Keys), and for
	// an acquire permit the permit key granted, or the semaphore's key when
	// none was (see Sem).
	Key string `json:"key,omitempty"`
	// Keys are the keys of a set, sorted, for an operation on a set
	// (SetAcquirer's AcquireSet, RenewSet, ReleaseSet): Check expands such
	// an operation into one per key (see Expand), so that the model treats
	// the set as holding each of its keys.
	Keys []string `json:"keys,omitempty"`
	// Member is, for an operation on a set answered NotAcquired or Lost,
	// the key of the set that the answer was about.
	Member string `json:"member,omitempty"`
	// Sem is the semaphore's key for an operation on one of its permits:
	// an acquire permit, a renewal, release or force release of a permit
	// key (lease.PermitKey), and a write fenced by a permit.
	Sem string `json:"sem,omitempty"`
	// Permits is, for an acquire permit, the number of permits asked
	// among.
	Permits int `json:"permits,omitempty"`
	// Acq identifies the acquisition: a digest of its secret, never the
	// secret itself.
	Acq string `json:"acq,omitempty"`
	// Owner is the owner string of an acquire (and of a KindClient call),
	// or the owner an observation reported.
	Owner string `json:"owner,omitempty"`
	// Candidates are the owners a hand-off offered the key to (KindHandOff),
	// or those of the standing offer an observation reported (KindObserve).
	Candidates []string `json:"candidates,omitempty"`
	// Held and Change are, for an observation, whether the key was held
	// and how the state came to be (lease.Change's String).
	Held   bool   `json:"held,omitempty"`
	Change string `json:"change,omitempty"`
	// Preferred marks an acquire that asked to be preferred
	// (lease.AcquireRequest.Preferred).
	Preferred bool `json:"preferred,omitempty"`
	// PreferredOwner is, for an observation, the key's preferred
	// candidate it reported (lease.Record.Preferred).
	PreferredOwner string `json:"preferred_owner,omitempty"`
	// Holder is the owner string of the holder a NotAcquired answer named.
	Holder string `json:"holder,omitempty"`
	// Token is the token presented (renew, release, write) or granted
	// (acquire, when OK).
	Token uint64 `json:"token,omitempty"`
	// TTL is the lease TTL asked for, in microseconds.
	TTL int64 `json:"ttl,omitempty"`
	// Resource names the fenced resource (write, read).
	Resource string `json:"resource,omitempty"`
	// Value is the value written, or read when OK.
	Value string `json:"value,omitempty"`
	// Claim marks a write that only advances the fence.
	Claim bool `json:"claim,omitempty"`
	// Lease is, for a write, the key of the handle that made it when that
	// is not Key: a permit's key for a write fenced by its semaphore's
	// key, a set's joined keys for a write fenced by one of its keys.
	Lease string `json:"lease,omitempty"`
	// Fence says how a write under a permit or a set was fenced:
	// FenceSlot, FenceSemaphore or FenceSet; "" for a lease's own key.
	Fence string `json:"fence,omitempty"`
	// Late marks a write that a client made on purpose with the snapshot
	// it held before it was paused, without checking its lease first.
	Late bool `json:"late,omitempty"`
	// Remaining is, for a write, how long the client believed it would
	// still hold the lease when it decided to write: Handle.Deadline minus
	// the client's clock, in microseconds, sampled after Call and before
	// SampledBy. It is 0 when not sampled.
	Remaining int64 `json:"remaining,omitempty"`
	SampledBy int64 `json:"sampled_by,omitempty"`
	// Fault describes a fault; LostData says the lease store lost
	// acknowledged writes in it (a restart without persistence, a
	// failover to a replica that missed writes).
	Fault    string `json:"fault,omitempty"`
	LostData bool   `json:"lost_data,omitempty"`
	// LostFences says that a fault with LostData lost writes to the
	// fenced resources too, because they live in the lease store: a
	// PostgreSQL failover to a replica takes the fences table with it.
	// The replica had a prefix of the primary's transactions, so each
	// resource goes back to some state it had since the last
	// KindReplicated before the fault; without one, nothing is taken
	// back and the model holds the store to every write.
	LostFences bool `json:"lost_fences,omitempty"`
	// EndsLeases says the fault may have ended every lease early on the
	// backend's clock without losing data: the server's clock stepped
	// forward by more than the TTL.
	EndsLeases bool `json:"ends_leases,omitempty"`
	// SplitBrain says the lease store had two primaries during the fault,
	// each answering some clients (it also loses data: set LostData). No
	// single sequence of states explains both, so Check leaves out of the
	// model every acquisition with a lease operation during the fault,
	// and checks their tokens only for uniqueness (see checkTokens).
	SplitBrain bool `json:"split_brain,omitempty"`

	// Outcome is what the operation returned.
	Outcome Outcome `json:"outcome"`
	// Out is the token in the answer: the holder's token for NotAcquired,
	// the fence's mark for Stale and for a read.
	Out uint64 `json:"out,omitempty"`
	// Err is the error text, if any.
	Err string `json:"err,omitempty"`

	// Call and Return are wall-clock times in microseconds since the Unix
	// epoch, read just before the request and just after the answer.
	Call   int64 `json:"call"`
	Return int64 `json:"return"`
}

func (o Op) String() string {
	b, _ := json.Marshal(o)
	return string(b)
}

// now returns the wall-clock time in microseconds, the unit of Op times.
func now() int64 { return time.Now().UnixMicro() }

// Recorder collects operations from many goroutines. Its zero value is not
// usable; call NewRecorder.
type Recorder struct {
	now func() int64

	mu      sync.Mutex
	ops     []Op
	out     io.Writer // also written to as JSON lines, when not nil
	err     error     // the first error writing to out
	watches []func(Op)
}

// Watch calls f with every operation added from now on, in the goroutine
// that adds it, after the operation is recorded. f must be fast and must
// not call back into the recorder.
func (r *Recorder) Watch(f func(Op)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watches = append(r.watches, f)
}

// NewRecorder returns an empty recorder that times operations on the wall
// clock. If out is not nil, every operation is also written to it as one
// JSON line, as a child process does to hand its history to the parent.
func NewRecorder(out io.Writer) *Recorder { return &Recorder{now: now, out: out} }

// NewRecorderOn returns an empty recorder that times operations on clock,
// which must be the backend's clock (a test's FakeClock driving the memory
// backend).
func NewRecorderOn(clock interface{ Now() time.Time }) *Recorder {
	return &Recorder{now: func() int64 { return clock.Now().UnixMicro() }}
}

// Now returns the recorder's time in microseconds.
func (r *Recorder) Now() int64 { return r.now() }

// Add records op.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	if r.out != nil && r.err == nil {
		b, err := json.Marshal(op)
		if err == nil {
			_, err = r.out.Write(append(b, '\n'))
		}
		r.err = err
	}
	watches := r.watches
	r.mu.Unlock()
	for _, f := range watches {
		f(op)
	}
}

// Ops returns a copy of the operations recorded so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// Len returns the number of operations recorded so far.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Lanes hands out lane ids with a common prefix ("p" or "c1").
type Lanes struct {
	prefix string
	next   atomic.Int64
}

// NewLanes returns lane ids prefix/0, prefix/1, …
func NewLanes(prefix string) *Lanes { return &Lanes{prefix: prefix} }

// New returns a lane with a fresh id.
func (l *Lanes) New() *Lane {
	ln := &Lane{lanes: l}
	ln.id = l.id()
	return ln
}

func (l *Lanes) id() string { return fmt.Sprintf("%s/%d", l.prefix, l.next.Add(1)-1) }

// A Lane is one client's sequence of operations. When an operation's
// outcome is unknown, the lane retires its id and continues under a new
// one. It is safe for concurrent use.
type Lane struct {
	lanes *Lanes
	mu    sync.Mutex
	id    string
	acq   string // the acquisition of the last acquire recorded OK
}

// Granted returns the acquisition id of the last acquire recorded OK on
// the lane: after Client.Acquire succeeds, the handle's.
func (l *Lane) Granted() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acq
}

// ID returns the lane's current id.
func (l *Lane) ID() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id
}

// retire gives the lane a new id if its id is still id.
func (l *Lane) retire(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id == id {
		l.id = l.lanes.id()
	}
}

// record adds op, issued on lane, to r and retires the lane's id if the
// outcome is unknown.
func (l *Lane) record(r *Recorder, op Op) {
	r.Add(op)
	switch {
	case op.Outcome == Unknown:
		l.retire(op.Lane)
	case op.Kind == KindAcquire && op.Outcome == OK:
		l.mu.Lock()
		l.acq = op.Acq
		l.mu.Unlock()
	}
}

type laneKey struct{}

// WithLane returns a context that tells the recording backend which lane
// its calls belong to.
func WithLane(ctx context.Context, l *Lane) context.Context {
	return context.WithValue(ctx, laneKey{}, l)
}

// laneOf returns the lane of ctx, or fallback.
func laneOf(ctx context.Context, fallback *Lane) *Lane {
	if l, ok := ctx.Value(laneKey{}).(*Lane); ok {
		return l
	}
	return fallback
}
