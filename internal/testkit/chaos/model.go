package chaos

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// partition names the partition of an operation, or "" for an operation
// that takes no part in the model.
func partition(op Op) string {
	switch op.Kind {
	case KindAcquire, KindRenew, KindRelease, KindForceRelease, KindHandOff, KindObserve:
		return "lease " + op.Key
	case KindWrite, KindRead:
		return "resource " + op.Resource
	case KindFault:
		if op.Resource != "" {
			return "resource " + op.Resource // a copy per resource; see Check
		}
		if (op.LostData || op.EndsLeases) && op.Key != "" {
			return "lease " + op.Key // a copy per key; see Check
		}
	case KindReplicated:
		if op.Resource != "" {
			return "resource " + op.Resource // a copy per resource; see Check
		}
	}
	return ""
}

// state is the state of one partition; only the half that matches the
// partition's kind is used.
type state struct {
	// Lease partition.
	Max      uint64 // highest token granted
	Holder   uint64 // token of the latest acquisition, 0 if none
	Acq      string // id of the latest acquisition
	Released bool   // the latest acquisition was released
	ExpLo    int64  // the latest acquisition ends no earlier than this (µs)
	Lossy    bool   // a fault lost data since the latest grant
	Owner    string // owner of the latest acquisition, "" if not known

	// Offer of a hand-off of the latest acquisition that no grant has
	// taken yet (it may stand or have lapsed).
	Offered  bool
	OfferTok uint64 // the offered token; 0 if not known (an unknown outcome)
	Cands    string // the candidates, joined by "," (owners hold no ",")
	OfferLo  int64  // the offer certainly stands until this time (µs)
	OfferHi  int64  // the offer certainly lapsed by this time (µs)

	// Resource partition.
	Mark  uint64 // highest token the fence accepted
	Value string // the resource's value
	// Since holds, from a KindReplicated op until the next fault that
	// lost the fences, every state the resource was in since that op (see
	// sinceWith); "" when there is none.
	Since string
}

// ModelOptions configure the model.
type ModelOptions struct {
	// ClockTokens says that tokens are issued as max(last+1, backend time
	// in µs since the Unix epoch) on the clock Op times are read from, so
	// that a token bounds the time of its grant. True for Valkey and
	// PostgreSQL, false for the memory backend, which counts from 1.
	ClockTokens bool
}

// Model returns the porcupine model of the lease and fence rules.
//
// The model is checked per partition: one per lease key, with the key's
// acquire, renew and release calls (and faults that lost the lease store's
// data), and one per fenced resource, with its writes and reads (and the
// replicas' catching up and faults that lost the fences). A history
// is accepted if every partition is linearizable: there is an order of its
// operations, consistent with real time (an operation that returned before
// another was called comes first), in which every step below is allowed.
//
// # Lease partition
//
// The state is the latest acquisition the history proves was granted (its
// token and acquisition id), the highest token granted, whether that
// acquisition was released, and ExpLo: a time before which, on the
// backend's clock, that acquisition certainly had not ended. ExpLo is
// derived conservatively: an acquire or renew applied between call c and
// return r on a lease of TTL d was applied at a backend time of at least
// c, so the lease ends no earlier than c + d (backends round the TTL up,
// never down); a release, or a fault that lost the data, ends it no
// earlier than its call time. Scheduling delays in the recorder only make
// c earlier and r later, so they can only weaken the check, never raise a
// false alarm.
//
// A grant's own time on the backend's clock is bounded above by its return
// time r and, when tokens are issued as max(last+1, backend time in µs)
// (Valkey and PostgreSQL), by its token + 1µs: the token is at least the
// backend time at which it was granted. That is the backend's own clock
// judging the grant, independent of when the client saw the answer.
//
// Steps (anything not listed leaves the state alone and is always allowed):
//
//   - acquire OK with token T by acquisition A:
//     if A with token T is the latest acquisition and was not released,
//     it is an idempotent re-grant, and ExpLo becomes c + d (a grant or
//     renewal sets the expiry to its own time plus its TTL, which may
//     shorten it). Otherwise T must be greater than every token granted before
//     ("token not above every earlier one", which also catches a token
//     issued twice), and the grant's upper time bound must not be before
//     ExpLo of the previous acquisition ("two acquisitions valid at the
//     same time as judged by the backend's clock") unless that was A
//     itself (a set granted afresh with a key it still held, after
//     another of its keys was lost). A becomes the latest.
//   - acquire NotAcquired naming holder token H (when the backend names
//     one): H must not be below the highest token granted before (the
//     backend can't show an older acquisition as the holder) and must not
//     be the latest acquisition after it was released.
//   - renew OK by acquisition A: A must be the latest acquisition and not
//     released (a superseded or released acquisition must never be
//     renewed); ExpLo becomes c + d.
//   - release OK by acquisition A: as for renew; A is released and ExpLo
//     falls to c.
//   - force release OK that reports ending token T: T must be the latest
//     acquisition's token and it must not have been released ("a forced
//     release that reports ending a holder it did not end"); it is
//     released and ExpLo falls to c. One that reports nothing held: the
//     latest acquisition, if any, must have been released, or may have
//     ended by the operation's return (ExpLo not after it), or the store
//     lost data since ("nothing held while a lease certainly was").
//   - force release Lost (token T was not holding): unless data was lost,
//     T must not be the latest acquisition while it certainly held the
//     lease (not released, ExpLo after the return).
//   - force release Unknown: either nothing changed, or it ended the
//     latest acquisition (if T is 0 or its token) as an OK one would.
//   - release Unknown by the latest acquisition, a fault that lost the
//     lease store's data, and a fault that ended leases early (the
//     server's clock stepped forward): ExpLo falls to c (the lease may
//     have ended then).
//     After such a fault, until the next grant, a NotAcquired answer may
//     name any earlier holder: the store may have gone back to a state
//     before a release or a grant (a promoted replica that missed them).
//
// # Resource partition
//
// The state is the fence's mark (the highest token accepted) and the
// resource's value. A write with an unknown outcome may or may not have
// been applied, so the model is nondeterministic and porcupine tracks every
// state that is still possible.
//
//   - write OK with token T: T must be at least the mark ("an accepted
//     fenced write whose token is below the highest already accepted");
//     the mark becomes T and the value the written one (a claim keeps the
//     value).
//   - write Stale: T must be below the mark, and the mark the fence
//     reported must be the mark; nothing changes. A stale write that
//     changed the value anyway is caught by the next read, which then
//     matches no state ("a stale write that changed data").
//   - write Unknown: either nothing changed, or (if T is at least the
//     mark) the write was applied.
//   - read OK: the mark and value read must be the state's.
//   - replicated (KindReplicated: a replica had every write acknowledged
//     before it): the states the resource goes through from here are
//     remembered, starting with the current one.
//   - a fault that lost data, the fences' included (LostFences, a
//     failover to that replica): the state goes back to any state
//     remembered since the last replicated, and nothing is remembered
//     any more. Physical replication replays the primary's transactions
//     in order, and a fenced write commits its value and its mark in one
//     transaction, so the promoted replica has the resource as it was at
//     some point since it caught up. Without a replicated before it, the
//     fault takes nothing back.
//
// # Permits and sets
//
// A permit of a semaphore is a lease on its permit key
// (lease.PermitKey), and a set holds each of its keys: Check expands an
// operation on a set into one per key (see Expand), and records a granted
// permit on its permit key, so the lease partitions above check both
// against every other acquisition of those keys (a set and a lease, or
// two sets, sharing a key; a permit slot granted twice). A refused permit
// names no permit key and takes no part. What is not per key is checked
// beside the model: the bound of each semaphore (checkPermits) and the
// order of its tokens across slots (checkSemaphoreTokens). Fenced writes
// under permits and sets are resource operations like any other: a
// resource fenced per slot, per semaphore or by a key of a set.
//
// # Hand-offs and observations
//
// A hand-off (KindHandOff) and an observer's state (KindObserve) belong to
// the key's partition. The state also keeps the latest acquisition's
// owner and the offer of a hand-off no grant has taken yet: its token
// (unknown after an unknown outcome), candidates, and the times by which
// it certainly still stood (the hand-off's call + window) and certainly
// had lapsed (its return + window + 1ms).
//
//   - hand-off OK by acquisition A with offered token T: A must be the
//     latest acquisition and not released, and T above every token
//     before; A is released (ExpLo falls to c) and the offer recorded.
//     Unknown: either nothing changed, or that, with T unknown.
//   - acquire OK while an offer is recorded: the offered token only by a
//     candidate and not after the offer certainly lapsed; any other grant
//     (another owner, or a candidate with another token) only above the
//     offered token and, unless a fault lost data since the latest grant
//     (the offer may be gone with it), only if its time bound (see
//     grantedBy) is not before the offer certainly stood until.
//   - force release while an offer is recorded: it may have ended the
//     offer at its call.
//   - observation: see state.observable; or, failing that, see
//     state.unseen: a grant the history does not show (an acquire whose
//     outcome is unknown was applied, perhaps late, on the backend),
//     which the observation reveals and the state then takes in.
//
// # Porcupine
//
// Inputs are Op values whose Return is already set to math.MaxInt64 for
// operations with unknown outcomes; outputs are ignored (the outcome is in
// the Op). Check prepares the history.
func Model(o ModelOptions) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			parts := map[string][]porcupine.Operation{}
			var names []string
			for _, h := range history {
				p := partition(h.Input.(Op))
				if _, ok := parts[p]; !ok {
					names = append(names, p)
				}
				parts[p] = append(parts[p], h)
			}
			sort.Strings(names)
			out := make([][]porcupine.Operation, 0, len(names))
			for _, n := range names {
				out = append(out, parts[n])
			}
			return out
		},
		Init: func() []any { return []any{state{}} },
		Step: func(s, in, _ any) []any {
			return step(o, s.(state), in.(Op))
		},
		DescribeOperation: func(in, _ any) string { return describe(in.(Op)) },
		DescribeState:     func(s any) string { return describeState(s.(state)) },
	}
	return nm.ToModel()
}

// step returns the states s can move to with op: none if op is not allowed
// in s.
func step(o ModelOptions, s state, op Op) []any {
	one := func(ok bool, next state) []any {
		if !ok {
			return nil
		}
		return []any{next}
	}
	switch op.Kind {
	case KindAcquire:
		switch op.Outcome {
		case OK:
			if s.current(op) {
				s.ExpLo = op.Call + op.TTL
				return one(true, s)
			}
			if s.Acq == unseenAcq && op.Token == s.Holder && !s.Released && (op.Owner == "" || op.Owner == s.Owner) {
				// The grant an observer revealed was this acquisition's,
				// answered at last (an idempotent retry of an acquire
				// whose outcome was unknown).
				s.Acq, s.ExpLo = op.Acq, op.Call+op.TTL
				return one(true, s)
			}
			next := state{Max: max(s.Max, op.Token), Holder: op.Token, Acq: op.Acq, Owner: op.Owner, ExpLo: op.Call + op.TTL}
			if s.Offered {
				cand := slices.Contains(strings.Split(s.Cands, ","), op.Owner)
				switch {
				case s.OfferTok != 0 && op.Token == s.OfferTok:
					// The offered token: only a candidate, only while the
					// offer may still stand (also after a fault that lost
					// data: the offer may have survived it).
					return one(cand && op.Call <= s.OfferHi, next)
				case op.Token <= s.Max:
					return nil
				case s.Lossy:
					// The offer may have been lost with the data: anyone,
					// above it.
				case s.OfferTok == 0 && cand:
					// The token of an offer whose outcome is unknown, or
					// one after its window.
				case grantedBy(o, op) < s.OfferLo:
					// Anyone else, or another token, only after the window.
					return nil
				}
			}
			if op.Token <= s.Max {
				return nil
			}
			if s.Holder != 0 && op.Acq != s.Acq && grantedBy(o, op) < s.ExpLo {
				return nil
			}
			return one(true, next)
		case NotAcquired:
			if op.Out == 0 || s.Lossy {
				// After a fault that lost data, the store may show any
				// holder it had before the loss, even one released or
				// superseded since.
				return one(true, s)
			}
			return one(op.Out >= s.Max && !(op.Out == s.Holder && s.Released), s)
		}
	case KindRenew:
		if op.Outcome == OK && op.Token == 0 && op.Acq != s.Acq {
			return one(true, s) // by secret alone: an acquisition never seen granted
		}
		if op.Outcome == OK {
			s.ExpLo = op.Call + op.TTL
			return one(s.current(op), s)
		}
	case KindRelease:
		switch {
		case op.Outcome == OK && op.Token == 0 && op.Acq != s.Acq:
			return one(true, s) // by secret alone: an acquisition never seen granted
		case op.Outcome == OK:
			ok := s.current(op)
			s.Released, s.ExpLo = true, min(s.ExpLo, op.Call)
			return one(ok, s)
		case op.Outcome == Unknown:
			if op.Token != 0 && op.Token == s.Holder && op.Acq == s.Acq {
				s.ExpLo = min(s.ExpLo, op.Call)
			}
		}
	case KindForceRelease:
		ended := s
		ended.Released, ended.ExpLo = true, min(s.ExpLo, op.Call)
		if s.Offered { // a forced release ends a standing offer
			ended.OfferLo = min(s.OfferLo, op.Call)
		}
		held := s.Holder != 0 && !s.Released && s.ExpLo > op.Return && !s.Lossy
		switch op.Outcome {
		case OK:
			if op.Out != 0 && s.Lossy {
				// After lost data the store may show an earlier holder.
				return one(op.Out <= s.Max && (op.Token == 0 || op.Token == op.Out), ended)
			}
			if op.Out != 0 {
				return one(op.Out == s.Holder && !s.Released && (op.Token == 0 || op.Token == op.Out), ended)
			}
			if s.Offered { // it ended the offer, if it still stood
				s.OfferLo = min(s.OfferLo, op.Call)
			}
			return one(op.Token == 0 && !held, s)
		case Lost:
			return one(op.Token != 0 && !(held && op.Token == s.Holder), s)
		case Unknown:
			if s.Holder != 0 && !s.Released && (op.Token == 0 || op.Token == s.Holder) || s.Offered && op.Token == 0 {
				return []any{s, ended}
			}
		}
	case KindHandOff:
		handed := s
		handed.Released, handed.ExpLo = true, min(s.ExpLo, op.Call)
		handed.Offered, handed.OfferTok, handed.Cands = true, op.Out, strings.Join(op.Candidates, ",")
		handed.Max = max(s.Max, op.Out)
		handed.OfferLo, handed.OfferHi = op.Call+op.TTL, math.MaxInt64
		switch op.Outcome {
		case OK:
			handed.OfferHi = op.Return + op.TTL + int64(time.Millisecond/time.Microsecond)
			return one(s.current(op) && op.Out > s.Max, handed)
		case Unknown:
			if s.current(op) {
				handed.OfferTok = 0
				return []any{s, handed}
			}
		}
	case KindObserve:
		if op.Outcome == OK {
			if s.observable(op) {
				return []any{s}
			}
			next, ok := s.unseen(op)
			return one(ok, next)
		}
	case KindFault:
		switch {
		case op.Resource != "": // a copy for a resource
			if !op.LostData || !op.LostFences || s.Since == "" {
				return []any{s}
			}
			return sinceStates(s.Since)
		case op.LostData:
			s.ExpLo = min(s.ExpLo, op.Call)
			s.OfferLo = min(s.OfferLo, op.Call)
			s.Lossy = true
		case op.EndsLeases:
			s.ExpLo = min(s.ExpLo, op.Call)
			s.OfferLo = min(s.OfferLo, op.Call)
		}
	case KindReplicated:
		s.Since = sinceWith("", s.Mark, s.Value)
		return []any{s}
	case KindWrite:
		applied := s
		applied.Mark = op.Token
		if !op.Claim {
			applied.Value = op.Value
		}
		if s.Since != "" {
			applied.Since = sinceWith(s.Since, applied.Mark, applied.Value)
		}
		admitted := op.Token >= s.Mark
		switch op.Outcome {
		case OK:
			return one(admitted, applied)
		case Stale:
			return one(!admitted && op.Out == s.Mark, s)
		case Unknown:
			if admitted {
				return []any{s, applied}
			}
		}
	case KindRead:
		if op.Outcome == OK {
			return one(op.Out == s.Mark && op.Value == s.Value, s)
		}
	}
	return []any{s}
}

// current reports whether op (a renew or release) names the latest
// acquisition, which was not released. Token 0 names an acquisition by its
// secret alone (Backend.Release allows it; the memory and PostgreSQL
// backends allow it for Renew too).
func (s state) current(op Op) bool {
	return s.Holder != 0 && (op.Token == s.Holder || op.Token == 0) && op.Acq == s.Acq && !s.Released
}

// observable reports whether an observation op (KindObserve, OK) could
// have been read in s: a holder must be the latest acquisition, not
// released, with its owner; a standing offer must be the latest hand-off's
// while it may stand; a free key must not be certainly held (the latest
// acquisition not released and not yet possibly expired) nor certainly
// offered, and its token must be the last one issued. After a fault that
// lost data, until the next grant, anything goes: the store may show any
// state it had before.
func (s state) observable(op Op) bool {
	if s.Lossy {
		return true
	}
	switch {
	case op.Held:
		return op.Out == s.Holder && !s.Released && (s.Owner == "" || op.Owner == s.Owner)
	case len(op.Candidates) > 0:
		return s.Offered && (op.Out == s.OfferTok || s.OfferTok == 0 && op.Out > s.Holder) &&
			strings.Join(op.Candidates, ",") == s.Cands && op.Call <= s.OfferHi
	}
	if s.Holder != 0 && !s.Released && s.ExpLo > op.Return || s.Offered && s.OfferLo > op.Return {
		return false // certainly held, or certainly offered
	}
	switch {
	case op.Out == 0:
		return s.Max == 0 // no record: never granted (the retention outlasts a row)
	case s.Offered:
		return op.Out == s.OfferTok || s.OfferTok == 0 && op.Out > s.Holder
	}
	return op.Out == s.Holder
}

// unseenAcq is the acquisition id of the latest acquisition when only an
// observation showed its grant (see state.unseen).
const unseenAcq = "(unseen)"

// unseen reports whether an observation op that s cannot show (see
// observable) reveals a grant the history does not show: an acquire
// whose outcome is unknown may have been applied at any time after its
// call, and only an observer (or a refused acquire, which the model
// takes as is) reads its token. It returns the state with that grant in
// it. Such a grant obeys the rules of any other: its token is above
// every earlier one (the offered token itself only for a candidate while
// the offer may stand), and it was made before the read returned, while
// the latest acquisition was not certainly holding the key and no offer
// to others certainly stood. A free state means the grant has ended
// since; its end is not known.
func (s state) unseen(op Op) (state, bool) {
	if s.Lossy || op.Out == 0 || len(op.Candidates) > 0 || s.Holder != 0 && !s.Released && s.ExpLo > op.Return {
		return s, false
	}
	switch cand := slices.Contains(strings.Split(s.Cands, ","), op.Owner); {
	case !s.Offered:
		if op.Out <= s.Max {
			return s, false
		}
	case s.OfferTok != 0 && op.Out == s.OfferTok:
		if !op.Held || !cand || op.Call > s.OfferHi {
			return s, false
		}
	case op.Out <= s.Max:
		return s, false
	case s.OfferTok == 0 && op.Held && cand:
	case s.OfferLo > op.Return:
		return s, false // anyone else only after the window
	}
	next := state{Max: max(s.Max, op.Out), Holder: op.Out, Acq: unseenAcq, Owner: op.Owner, ExpLo: op.Call}
	if !op.Held {
		next.Owner, next.Released, next.ExpLo = "", true, 0
	}
	return next, true
}

// grantedBy returns a time no earlier than the backend time of the grant
// op: its return time and, with clock tokens, its token + 1µs.
func grantedBy(o ModelOptions, op Op) int64 {
	t := op.Return
	if o.ClockTokens && op.Token < math.MaxInt64 {
		t = min(t, int64(op.Token)+1)
	}
	return t
}

// relevant reports whether op can change a partition's state or be
// refused by the model. Other operations (an acquire with an unknown
// outcome, a renew that was refused, …) are always allowed and change
// nothing, so leaving them out of the checked history changes no verdict;
// they are drawn in the visualisation as annotations instead.
func relevant(op Op) bool {
	switch op.Kind {
	case KindAcquire:
		if op.Sem != "" && op.Key == op.Sem {
			return false // a permit not granted: no permit key to check it on
		}
		return op.Outcome == OK || op.Outcome == NotAcquired && op.Out != 0
	case KindRenew:
		return op.Outcome == OK
	case KindRelease:
		return op.Outcome == OK || op.Outcome == Unknown && op.Token != 0
	case KindWrite:
		return op.Outcome == OK || op.Outcome == Stale || op.Outcome == Unknown
	case KindRead:
		return op.Outcome == OK
	case KindForceRelease:
		return op.Outcome == OK || op.Outcome == Unknown || op.Outcome == Lost && op.Token != 0
	case KindHandOff:
		return op.Outcome == OK || op.Outcome == Unknown
	case KindObserve:
		return op.Outcome == OK
	case KindFault:
		return op.LostData || op.EndsLeases
	case KindReplicated:
		return true
	}
	return false
}

// sinceWith returns the set of resource states since, encoded as sorted,
// distinct "mark NUL value" entries separated by SOH (so that equal sets
// are equal strings), with the state (mark, value) added. Values come
// from the harness and hold neither byte.
func sinceWith(since string, mark uint64, value string) string {
	entry := strconv.FormatUint(mark, 10) + "\x00" + value
	var entries []string
	if since != "" {
		entries = strings.Split(since, "\x01")
	}
	i, found := slices.BinarySearch(entries, entry)
	if found {
		return since
	}
	return strings.Join(slices.Insert(entries, i, entry), "\x01")
}

// sinceStates returns the resource states of the set since, each with no
// set of its own.
func sinceStates(since string) []any {
	var out []any
	for _, entry := range strings.Split(since, "\x01") {
		markText, value, _ := strings.Cut(entry, "\x00")
		mark, _ := strconv.ParseUint(markText, 10, 64)
		out = append(out, state{Mark: mark, Value: value})
	}
	return out
}

func describe(op Op) string {
	d := describeOp(op)
	switch {
	case op.Keys != nil && op.Kind != KindWrite:
		d += " (set " + strings.Join(op.Keys, ",") + ")"
	case op.Sem != "" && op.Kind == KindAcquire:
		d += fmt.Sprintf(" (permit of %s among %d)", op.Sem, op.Permits)
	case op.Fence != "" && op.Lease != "":
		d += " (fenced " + op.Fence + ", under " + op.Lease + ")"
	case op.Fence != "":
		d += " (fenced " + op.Fence + ")"
	}
	return d
}

func describeOp(op Op) string {
	switch op.Kind {
	case KindAcquire:
		switch op.Outcome {
		case OK:
			return fmt.Sprintf("acquire %s → token %d", op.Acq, op.Token)
		case NotAcquired:
			if op.Preferred {
				return fmt.Sprintf("acquire %s (preferred) → held by %d", op.Acq, op.Out)
			}
			return fmt.Sprintf("acquire %s → held by %d", op.Acq, op.Out)
		}
	case KindRenew, KindRelease:
		return fmt.Sprintf("%s %s/%d → %s", op.Kind, op.Acq, op.Token, op.Outcome)
	case KindForceRelease:
		if op.Outcome == OK {
			return fmt.Sprintf("force release %d → ended %d", op.Token, op.Out)
		}
		return fmt.Sprintf("force release %d → %s", op.Token, op.Outcome)
	case KindWrite:
		what := "write " + op.Value
		if op.Claim {
			what = "claim"
		}
		if op.Late {
			what = "late " + what
		}
		if op.Outcome == Stale {
			return fmt.Sprintf("%s @%d → stale (mark %d)", what, op.Token, op.Out)
		}
		return fmt.Sprintf("%s @%d → %s", what, op.Token, op.Outcome)
	case KindRead:
		return fmt.Sprintf("read → mark %d, %q", op.Out, op.Value)
	case KindHandOff:
		if op.Outcome == OK {
			return fmt.Sprintf("hand off %s/%d to %s for %dms → token %d", op.Acq, op.Token, strings.Join(op.Candidates, ","), op.TTL/1000, op.Out)
		}
		return fmt.Sprintf("hand off %s/%d to %s → %s", op.Acq, op.Token, strings.Join(op.Candidates, ","), op.Outcome)
	case KindObserve:
		switch {
		case op.Outcome != OK:
			return "observe → " + string(op.Outcome)
		case op.Held && op.PreferredOwner != "":
			return fmt.Sprintf("observe %s: held by %s/%d, preferred %s", op.Change, op.Owner, op.Out, op.PreferredOwner)
		case op.Held:
			return fmt.Sprintf("observe %s: held by %s/%d", op.Change, op.Owner, op.Out)
		case len(op.Candidates) > 0:
			return fmt.Sprintf("observe %s: offered to %s/%d", op.Change, strings.Join(op.Candidates, ","), op.Out)
		}
		return fmt.Sprintf("observe %s: free after %d", op.Change, op.Out)
	case KindFault:
		return "fault: " + op.Fault
	case KindReplicated:
		return "replica caught up"
	case KindEvent:
		return fmt.Sprintf("%s %s/%d: %s", op.Fault, op.Key, op.Token, op.Err)
	}
	return fmt.Sprintf("%s → %s", op.Kind, op.Outcome)
}

func describeState(s state) string {
	switch {
	case s.Holder != 0:
		rel := ""
		if s.Released {
			rel = ", released"
		}
		offer := ""
		if s.Offered {
			offer = fmt.Sprintf(", offered to %s with token %d from ≥ %d µs to ≤ %d µs", s.Cands, s.OfferTok, s.OfferLo, s.OfferHi)
		}
		return fmt.Sprintf("holder %s/%d%s, ends ≥ %d µs%s", s.Acq, s.Holder, rel, s.ExpLo, offer)
	case s.Mark != 0 || s.Value != "" || s.Since != "":
		since := ""
		if s.Since != "" {
			since = fmt.Sprintf(", %d states since the replica caught up", strings.Count(s.Since, "\x01")+1)
		}
		return fmt.Sprintf("mark %d, value %q%s", s.Mark, s.Value, since)
	}
	return "initial"
}
