package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/golib/lease/lease"
)

// The ways a write under a permit or a set is fenced (Op.Fence; see
// docs/semaphores-and-sets.md).
const (
	// FenceSlot fences the resource of one permit slot by the permit's
	// own key (Handle.Snapshot).
	FenceSlot = "slot"
	// FenceSemaphore fences a resource shared by the whole semaphore by
	// the semaphore's key, with the permit's token
	// (Handle.SnapshotFor(semaphore)).
	FenceSemaphore = "semaphore"
	// FenceSet fences the resource of one key of a set by that key, with
	// the set's token (Handle.SnapshotFor(key)).
	FenceSet = "set"
)

// Expand returns history with every operation on a set of keys (an Op
// with Keys) replaced, in its place, by operations on its keys, so that
// the model, which is checked per key, treats a set as holding each of
// its keys: a set and a lease, or two sets, that share a key are checked
// against each other in that key's partition like any two acquisitions.
//
//   - An acquire, renew or release that was applied (OK), or whose outcome
//     is unknown or failed, becomes one per key with that outcome.
//   - A refused acquire (NotAcquired) becomes one on the key whose holder
//     it named (Member): the other keys may be free.
//   - A renewal refused as Lost becomes one on the key it named: RenewSet
//     changed nothing.
//   - A release refused as Lost becomes a Lost release of the key it
//     named and, on each other key, a release with an unknown outcome:
//     ReleaseSet ended the acquisition's lease on every key it still held,
//     and which those were is not known.
//
// Each copy keeps Keys; its Key is one of them. An operation already on
// one key of its set is left as it is, so Expand is idempotent.
func Expand(history []Op) []Op {
	if !slices.ContainsFunc(history, func(op Op) bool { return op.Keys != nil }) {
		return history
	}
	out := make([]Op, 0, len(history))
	for _, op := range history {
		if op.Keys == nil || slices.Contains(op.Keys, op.Key) {
			out = append(out, op)
			continue
		}
		member := slices.Contains(op.Keys, op.Member)
		for _, k := range op.Keys {
			c := op
			c.Key = k
			switch {
			case op.Outcome == NotAcquired && member && k != op.Member,
				op.Outcome == Lost && op.Kind != KindRelease && member && k != op.Member:
				continue
			case op.Outcome == NotAcquired && !member:
				c.Out, c.Holder = 0, "" // about no key we know
			case op.Outcome == Lost && op.Kind == KindRelease && k != op.Member:
				c.Outcome = Unknown
			}
			out = append(out, c)
		}
	}
	return out
}

// permitHold is the interval during which one acquisition certainly held
// a permit, on the backend's clock (see checkPermits).
type permitHold struct {
	key, acq string
	lane     string
	token    uint64
	from, to int64
}

// checkPermits checks the bound of every semaphore in history (expanded;
// see Expand): no permit granted at a slot at or above the number of
// permits its call asked among, and never more permits of a semaphore
// held at once, as judged by the backend's clock, than the highest
// number of permits asked among. It returns the violations and the
// number of permit acquisitions checked.
//
// Each permit acquisition certainly held its permit key from the time by
// which its first grant had happened on the backend's clock (grantedBy:
// its return, or with clock tokens its token + 1µs) until the expiry its
// acquires and renewals certainly set (see holdUntil: an extension
// applied no earlier than its call c sets the expiry to no less than c +
// TTL), cut short at the call time of anything that may have ended it
// after its grant was called: a release by the acquisition (OK or
// unknown), a forced release of its key, a fault that lost data or ended
// leases. That is the model's judgement of a valid
// holder, made for every acquisition rather than the latest of one key,
// so scheduling delays in the recorder only shorten the intervals. More
// of them overlapping than the bound is a violation. Acquisitions in a
// split brain (Op.SplitBrain) are left out, as by the model.
func checkPermits(o ModelOptions, history []Op) ([]string, int) {
	// An acquisition holds one permit key under one token at a time; a
	// secret granted the key again with a new token (after its first
	// grant ended) is another hold.
	type ref struct {
		key, acq string
		token    uint64
	}
	var (
		problems []string
		grants   = map[ref]*permitHold{}
		first    = map[ref]int64{} // call of the first grant
		bound    = map[string]int{}
		ends     = map[acqRef][]Op{} // releases by acquisition
		forced   = map[string][]Op{} // forced releases by key
		faults   []Op
	)
	split := splitAcquisitions(history)
	attempted := firstAttempts(history)
	for _, op := range history {
		switch {
		case op.Kind == KindAcquire && op.Outcome == OK && op.Sem != "" && op.Key != op.Sem:
			if split[acqRef{op.Key, op.Acq}] {
				continue
			}
			bound[op.Sem] = max(bound[op.Sem], op.Permits)
			if slot := slotOf(op); slot < 0 || op.Permits > 0 && slot >= op.Permits {
				problems = append(problems, fmt.Sprintf("semaphore %s: lane %s was granted %s (token %d) at %s, asking among %d permits: a slot out of range",
					op.Sem, op.Lane, op.Key, op.Token, fmtMicros(op.Call), op.Permits))
			}
			r := ref{op.Key, op.Acq, op.Token}
			g, ok := grants[r]
			if !ok {
				g = &permitHold{key: op.Key, acq: op.Acq, lane: op.Lane, token: op.Token, from: math.MaxInt64, to: math.MinInt64}
				grants[r], first[r] = g, attempted[op.Acq]
			}
			g.from = min(g.from, grantedBy(o, op))
			first[r] = min(first[r], attempted[op.Acq])
		case op.Kind == KindRelease && (op.Outcome == OK || op.Outcome == Unknown):
			r := acqRef{op.Key, op.Acq}
			ends[r] = append(ends[r], op)
		case op.Kind == KindForceRelease && (op.Outcome == OK || op.Outcome == Unknown):
			forced[op.Key] = append(forced[op.Key], op)
		case op.Kind == KindFault && (op.LostData || op.EndsLeases):
			faults = append(faults, op)
		}
	}
	// The extensions that may have set each hold's expiry: its acquires
	// and renewals that were applied or may have been (an unanswered
	// acquire of a permit names no slot, an extension by secret alone no
	// token).
	exts := map[string][]Op{} // by acquisition
	for _, op := range history {
		if (op.Kind == KindAcquire || op.Kind == KindRenew) && (op.Outcome == OK || op.Outcome == Unknown) && op.Acq != "" {
			exts[op.Acq] = append(exts[op.Acq], op)
		}
	}
	bySem := map[string][]permitHold{}
	for r, g := range grants {
		g.to = holdUntil(r.key, r.token, exts[r.acq])
		cut := func(ops []Op) {
			for _, e := range ops {
				ret := e.Return
				if e.Outcome == Unknown {
					ret = unknownReturn
				}
				if ret > first[r] {
					g.to = min(g.to, e.Call)
				}
			}
		}
		cut(ends[acqRef{r.key, r.acq}])
		cut(forced[r.key])
		cut(faults)
		sem := SemaphoreOf(r.key)
		bySem[sem] = append(bySem[sem], *g)
	}
	for _, sem := range slices.Sorted(maps.Keys(bySem)) {
		if p := overlap(sem, bound[sem], bySem[sem]); p != "" {
			problems = append(problems, p)
		}
	}
	return problems, len(grants)
}

// firstAttempts returns the call time of the first acquire attempt of
// each acquisition. An attempt whose outcome was unknown may have been
// granted, and the next attempt of the same call (the same secret) then
// gets the same grant again, idempotently: that grant may have happened
// any time after the first attempt was called.
func firstAttempts(history []Op) map[string]int64 {
	first := map[string]int64{}
	for _, op := range history {
		if op.Kind != KindAcquire || op.Acq == "" {
			continue
		}
		if c, ok := first[op.Acq]; !ok || op.Call < c {
			first[op.Acq] = op.Call
		}
	}
	return first
}

// holdUntil returns a time until which the hold of key under token
// certainly lasted, given the extensions exts of its acquisition (OK or
// unknown acquires and renewals): the latest OK extension L of the hold
// was applied after its call, with the lease valid, and the last
// extension applied (L, or one that may have been applied after L was
// called) set its expiry to no less than its own call plus its TTL. A
// grant or renewal sets the expiry to its own time plus its TTL, so a
// later one with a shorter TTL may shorten it.
func holdUntil(key string, token uint64, exts []Op) int64 {
	sem := SemaphoreOf(key)
	mine := func(e Op) bool {
		return (e.Key == key || e.Kind == KindAcquire && e.Outcome == Unknown && e.Key == sem) &&
			(e.Token == token || e.Token == 0)
	}
	var last *Op
	for i, e := range exts {
		if e.Outcome == OK && e.Key == key && e.Token == token && (last == nil || e.Call > last.Call) {
			last = &exts[i]
		}
	}
	if last == nil {
		return math.MinInt64
	}
	until := last.Call + last.TTL
	for _, e := range exts {
		ret := e.Return
		if e.Outcome == Unknown {
			ret = unknownReturn
		}
		if mine(e) && ret > last.Call {
			until = min(until, e.Call+e.TTL)
		}
	}
	return max(until, last.Call)
}

// slotOf returns the slot of the permit key of op, a grant of a permit,
// or -1.
func slotOf(op Op) int {
	sem, slot, ok := lease.ParsePermitKey(op.Key)
	if !ok || sem != op.Sem {
		return -1
	}
	return slot
}

// overlap returns a description of the first instant at which more than
// n of holds overlap, or "".
func overlap(sem string, n int, holds []permitHold) string {
	type edge struct {
		at int64
		up bool
		h  permitHold
	}
	var edges []edge
	for _, h := range holds {
		if h.from < h.to {
			edges = append(edges, edge{h.from, true, h}, edge{h.to, false, h})
		}
	}
	// Ends before starts at one instant: the intervals are half-open.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		switch {
		case a.up == b.up:
			return 0
		case a.up:
			return 1
		}
		return -1
	})
	live := map[permitHold]bool{}
	for _, e := range edges {
		if !e.up {
			delete(live, e.h)
			continue
		}
		live[e.h] = true
		if len(live) <= n {
			continue
		}
		var who []string
		for _, h := range slices.SortedFunc(maps.Keys(live), func(a, b permitHold) int { return cmp.Compare(a.from, b.from) }) {
			who = append(who, fmt.Sprintf("%s by %s/%d (lane %s, held %s–%s)", h.key, h.acq, h.token, h.lane, fmtMicros(h.from), fmtMicros(h.to)))
		}
		return fmt.Sprintf("semaphore %s: %d permits held at once at %s, more than its %d permits, as judged by the backend's clock: %s",
			sem, len(live), fmtMicros(e.at), n, strings.Join(who, "; "))
	}
	return ""
}

// checkSemaphoreTokens checks that permit tokens rise across each
// semaphore as a whole, whatever the slot: no token granted to two
// acquisitions of one semaphore, and a grant whose acquisition's first
// attempt was called after another grant of the semaphore returned has a
// higher token. The model checks each
// permit key on its own; this is what lets a resource be fenced by the
// semaphore's key. Idempotent re-grants (the same acquisition and token
// again) and acquisitions in a split brain are left out.
func checkSemaphoreTokens(history []Op) []string {
	split := splitAcquisitions(history)
	attempted := firstAttempts(history)
	bySem := map[string][]Op{}
	type grant struct {
		key, acq string
		token    uint64
	}
	seen := map[grant]bool{}
	for _, op := range history {
		if op.Kind != KindAcquire || op.Outcome != OK || op.Sem == "" || op.Key == op.Sem {
			continue
		}
		g := grant{op.Key, op.Acq, op.Token}
		if split[acqRef{op.Key, op.Acq}] || seen[g] {
			continue
		}
		seen[g] = true
		bySem[op.Sem] = append(bySem[op.Sem], op)
	}
	var problems []string
	for _, sem := range slices.Sorted(maps.Keys(bySem)) {
		grants := bySem[sem]
		byToken := map[uint64]Op{}
		for _, g := range grants {
			if f, ok := byToken[g.Token]; ok {
				problems = append(problems, fmt.Sprintf("semaphore %s: token %d granted twice: %s to %s (lane %s at %s) and %s to %s (lane %s at %s)",
					sem, g.Token, f.Key, f.Acq, f.Lane, fmtMicros(f.Call), g.Key, g.Acq, g.Lane, fmtMicros(g.Call)))
				continue
			}
			byToken[g.Token] = g
		}
		// A grant may have happened as early as the first attempt of its
		// acquisition (see firstAttempts).
		byCall := slices.Clone(grants)
		for i := range byCall {
			byCall[i].Call = attempted[byCall[i].Acq]
		}
		slices.SortFunc(byCall, func(a, b Op) int { return cmp.Compare(a.Call, b.Call) })
		byReturn := slices.Clone(grants)
		slices.SortFunc(byReturn, func(a, b Op) int { return cmp.Compare(a.Return, b.Return) })
		var top Op // the grant with the highest token among those returned so far
		i := 0
		for _, g := range byCall {
			for ; i < len(byReturn) && byReturn[i].Return < g.Call; i++ {
				if byReturn[i].Token > top.Token {
					top = byReturn[i]
				}
			}
			if top.Token != 0 && g.Token < top.Token {
				problems = append(problems, fmt.Sprintf("semaphore %s: %s was granted token %d (lane %s, its first attempt at %s) after %s had returned with token %d (lane %s at %s): permit tokens must rise across the semaphore",
					sem, g.Key, g.Token, g.Lane, fmtMicros(g.Call), top.Key, top.Token, top.Lane, fmtMicros(top.Return)))
			}
		}
	}
	return problems
}

// Tally counts the backend calls of one primitive by outcome.
type Tally struct {
	Acquires, Granted, Refused, AcquireUnknown int
	Renewals, Renewed                          int
	Releases, Released                         int
}

// WriteTally counts fenced writes by outcome.
type WriteTally struct{ Accepted, Refused, Unknown int }

// Counts are the operations of a history per primitive: the backend calls
// on leases, permits and sets, and the fenced writes by how they were
// fenced.
type Counts struct {
	Leases, Permits, Sets Tally
	// Writes are keyed by Op.Fence: "" for a lease's own key, FenceSlot,
	// FenceSemaphore, FenceSet.
	Writes map[string]WriteTally
}

// CountOps counts the operations of history, as recorded (not expanded).
func CountOps(history []Op) Counts {
	c := Counts{Writes: map[string]WriteTally{}}
	for _, op := range history {
		t := &c.Leases
		switch {
		case op.Keys != nil:
			t = &c.Sets
		case op.Sem != "":
			t = &c.Permits
		}
		switch op.Kind {
		case KindAcquire:
			t.Acquires++
			switch op.Outcome {
			case OK:
				t.Granted++
			case NotAcquired:
				t.Refused++
			case Unknown:
				t.AcquireUnknown++
			}
		case KindRenew:
			t.Renewals++
			if op.Outcome == OK {
				t.Renewed++
			}
		case KindRelease:
			t.Releases++
			if op.Outcome == OK {
				t.Released++
			}
		case KindWrite:
			w := c.Writes[op.Fence]
			switch op.Outcome {
			case OK:
				w.Accepted++
			case Stale:
				w.Refused++
			case Unknown:
				w.Unknown++
			}
			c.Writes[op.Fence] = w
		}
	}
	return c
}

func (t Tally) String() string {
	return fmt.Sprintf("%d acquires (%d granted, %d refused, %d unknown), %d renewals (%d ok), %d releases (%d ok)",
		t.Acquires, t.Granted, t.Refused, t.AcquireUnknown, t.Renewals, t.Renewed, t.Releases, t.Released)
}

func (c Counts) String() string {
	s := fmt.Sprintf("leases: %v; permits: %v; sets: %v; fenced writes accepted/refused as stale/unknown:", c.Leases, c.Permits, c.Sets)
	for i, f := range []string{"", FenceSlot, FenceSemaphore, FenceSet} {
		name := []string{"by lease key", "per slot", "per semaphore", "by set key"}[i]
		w := c.Writes[f]
		s += fmt.Sprintf(" %s %d/%d/%d", name, w.Accepted, w.Refused, w.Unknown)
		if i < 3 {
			s += ","
		}
	}
	return s
}
