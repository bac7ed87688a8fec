package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golib/lease/lease"
)

// observer is one observer lane: a Client.Observe sequence on one key,
// each state it reports recorded as a KindObserve.
type observer struct {
	key  string
	lane *Lane
	b    *timedBackend

	mu   sync.Mutex
	last Op // the last state reported, Kind "" before the first
}

// timedBackend times the Inspect calls of one observer on the recorder's
// clock: Observe reads the state with Inspect and yields it in the same
// goroutine, so the times of the last read are those of the state
// yielded.
type timedBackend struct {
	lease.Backend
	rec       *Recorder
	call, ret int64
}

func (t *timedBackend) Inspect(ctx context.Context, key string) (lease.Record, error) {
	t.call = t.rec.Now()
	r, err := t.Backend.Inspect(ctx, key)
	t.ret = t.rec.Now()
	return r, err
}

// WatchChanges implements lease.ChangeWatcher when the wrapped backend
// does, so that the observer hears of changes at once.
func (t *timedBackend) WatchChanges(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return watchChanges(ctx, t.Backend, key)
}

// observation returns the operation recording what an observer reported.
func observation(lane *Lane, key string, b *timedBackend, o lease.Observation, err error) Op {
	op := Op{Lane: lane.ID(), Kind: KindObserve, Key: key, Call: b.call, Return: b.ret, Outcome: OK}
	if err != nil {
		op.Outcome, op.Err = Failed, err.Error()
		return op
	}
	op.Held, op.Owner, op.Out, op.Change = o.Held, o.Owner, uint64(o.Token), o.Change.String()
	op.Candidates, op.PreferredOwner = slices.Clone(o.Candidates), o.Preferred
	return op
}

// startObservers starts o.Observers observer lanes on each of the keys.
func (h *Harness) startObservers(ctx context.Context) error {
	ctx, h.obsCancel = context.WithCancel(ctx)
	lanes := NewLanes("o")
	p := h.o.Policy.Options()
	for i := range h.o.Observers {
		for _, key := range h.o.Keys {
			b, _, closeFn, err := h.o.Open(ctx, fmt.Sprintf("chaos-observer%d", i))
			if err != nil {
				return fmt.Errorf("open observer %d: %w", i, err)
			}
			h.obsCloses = append(h.obsCloses, closeFn)
			ob := &observer{key: key, lane: lanes.New(), b: &timedBackend{Backend: b, rec: h.rec}}
			c, err := lease.NewClient(ob.b, lease.ClientOptions{Owner: fmt.Sprintf("chaos-observer%d", i)})
			if err != nil {
				return err
			}
			h.observers = append(h.observers, ob)
			h.obsWG.Add(1)
			go func() {
				defer h.obsWG.Done()
				seq := c.Observe(ctx, key, lease.ObserveOptions{Poll: p.TTL / 4, OperationTimeout: 2 * p.OperationTimeout})
				for o, err := range seq {
					op := observation(ob.lane, key, ob.b, o, err)
					h.rec.Add(op)
					if err == nil {
						ob.mu.Lock()
						ob.last = op
						ob.mu.Unlock()
					}
				}
			}()
		}
	}
	return nil
}

// StopObservers checks that every observer's last reported state is the
// state of its key, read directly from the backend once everything is
// quiet (after Stop and Converge), waiting up to wait for the observers
// to see it; then it stops them. It returns an error naming each observer
// whose last state was not the key's. With wait < 0 it only stops them.
func (h *Harness) StopObservers(ctx context.Context, wait time.Duration) error {
	var errs []error
	deadline := time.Now().Add(wait)
	for _, ob := range h.observers {
		if wait < 0 {
			break
		}
		for {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			r, err := ob.b.Backend.Inspect(rctx, ob.key)
			cancel()
			ob.mu.Lock()
			last := ob.last
			ob.mu.Unlock()
			if err == nil && last.Kind == KindObserve && last.Held == r.Held && last.Owner == r.Owner &&
				last.Out == uint64(r.Token) && slices.Equal(last.Candidates, r.Candidates) {
				break
			}
			if time.Now().After(deadline) {
				if err != nil {
					errs = append(errs, fmt.Errorf("observer %s of %q: reading the final state: %w", ob.lane.ID(), ob.key, err))
				} else {
					errs = append(errs, fmt.Errorf("observer %s of %q: the last state reported is %s, the final state held=%v owner=%q token %d candidates %q",
						ob.lane.ID(), ob.key, describe(last), r.Held, r.Owner, r.Token, r.Candidates))
				}
				break
			}
			sleep(ctx, 20*time.Millisecond)
		}
	}
	h.stopObservers()
	return errors.Join(errs...)
}

// stopObservers stops the observers and closes their connections.
func (h *Harness) stopObservers() {
	if h.obsCancel != nil {
		h.obsCancel()
	}
	h.obsWG.Wait()
	for _, c := range h.obsCloses {
		c()
	}
	h.obsCloses, h.observers = nil, nil
}

// roster tells the goroutine clients of a harness which owner string each
// of them uses for its Acquire call in progress, or its next one, and
// which key that call is for ("" for a permit or a set, or between
// calls), so that a holder can hand its lease off to them.
type roster struct {
	mu      sync.Mutex
	want    map[string]wanting // by client name
	offered map[string]string  // the key last handed off to each owner string
}

type wanting struct{ owner, key string }

func (r *roster) set(name, owner, key string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.want == nil {
		r.want = map[string]wanting{}
	}
	r.want[name] = wanting{owner, key}
}

// offer notes that key was handed off to the owner strings cands, so
// that a client about to acquire with one of them goes for key (see
// offeredTo), as a successor waiting for the key would.
func (r *roster) offer(key string, cands []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.offered == nil {
		r.offered = map[string]string{}
	}
	for _, c := range cands {
		r.offered[c] = key
	}
}

// offeredTo returns the key last handed off to owner, if any, and forgets
// it.
func (r *roster) offeredTo(owner string) (string, bool) {
	if r == nil {
		return "", false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key, ok := r.offered[owner]
	delete(r.offered, owner)
	return key, ok
}

// Nobody is an owner string that no client ever uses: an offer to it
// only lapses.
const Nobody = "chaos-nobody.r1"

// candidates picks one to three candidates for a hand-off of key by the
// client name: first the other clients acquiring key now, then the owner
// strings the others use next; now and then Nobody alone.
func (r *roster) candidates(name, key string, rng *rand.Rand) []string {
	if rng.IntN(8) == 0 {
		return []string{Nobody}
	}
	r.mu.Lock()
	var waiting, others []string
	for n, w := range r.want {
		switch {
		case n == name:
		case w.key == key:
			waiting = append(waiting, w.owner)
		default:
			others = append(others, w.owner)
		}
	}
	r.mu.Unlock()
	slices.Sort(waiting) // map order is random; the rng decides
	slices.Sort(others)
	rng.Shuffle(len(waiting), func(i, j int) { waiting[i], waiting[j] = waiting[j], waiting[i] })
	rng.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	out := append(waiting, others...)
	if len(out) == 0 {
		return []string{Nobody}
	}
	return out[:min(len(out), 1+rng.IntN(3))]
}

// ObserverCounts are what the observers of a run reported.
type ObserverCounts struct {
	// States is the number of states reported; Failed the failed reads.
	States, Failed int
	// Changes counts the states by Change (lease.Change's String).
	Changes map[string]int
}

// changeOrder is the order of lease.Change.
var changeOrder = []lease.Change{lease.ChangeInitial, lease.ChangeAcquired, lease.ChangeReleased, lease.ChangeExpired,
	lease.ChangeForceReleased, lease.ChangeHandedOff, lease.ChangePreferred, lease.ChangeRecordLost}

// CountObservations counts the observations of history.
func CountObservations(history []Op) ObserverCounts {
	c := ObserverCounts{Changes: map[string]int{}}
	for _, op := range history {
		switch {
		case op.Kind != KindObserve:
		case op.Outcome == OK:
			c.States++
			c.Changes[op.Change]++
		default:
			c.Failed++
		}
	}
	return c
}

// String reads: observer saw: initial=3 acquired=120 released=80 … (412
// states, 2 failed reads).
func (c ObserverCounts) String() string {
	var parts []string
	for _, ch := range changeOrder {
		parts = append(parts, fmt.Sprintf("%s=%d", ch, c.Changes[ch.String()]))
	}
	return fmt.Sprintf("observer saw: %s (%d states, %d failed reads)", strings.Join(parts, " "), c.States, c.Failed)
}

// HandOffCounts are the hand-offs of a run and what came of them.
type HandOffCounts struct {
	// OK, Lost and Unknown count the HandOff calls by outcome.
	OK, Lost, Unknown int
	// Taken counts the offers a candidate took (a grant with the
	// offered token); Refused the acquisitions refused because of an
	// offer (a NotAcquired with no holder named, during a window).
	Taken, Refused int
	// Preferred counts the acquire attempts that asked to be preferred
	// and found the key held (so asked the backend to mark them).
	Preferred int
}

// CountHandOffs counts the hand-offs of history.
func CountHandOffs(history []Op) HandOffCounts {
	var c HandOffCounts
	offered := map[string]map[uint64]bool{}
	for _, op := range history {
		if op.Kind == KindHandOff && op.Outcome == OK {
			if offered[op.Key] == nil {
				offered[op.Key] = map[uint64]bool{}
			}
			offered[op.Key][op.Out] = true
		}
	}
	for _, op := range history {
		switch {
		case op.Kind == KindHandOff && op.Outcome == OK:
			c.OK++
		case op.Kind == KindHandOff && op.Outcome == Lost:
			c.Lost++
		case op.Kind == KindHandOff && op.Outcome == Unknown:
			c.Unknown++
		case op.Kind == KindAcquire && op.Outcome == OK && offered[op.Key][op.Token]:
			c.Taken++
			delete(offered[op.Key], op.Token) // once, not its retries
		case op.Kind == KindAcquire && op.Outcome == NotAcquired && strings.Contains(op.Err, "offered to"):
			c.Refused++
		}
		if op.Kind == KindAcquire && op.Preferred && op.Outcome == NotAcquired && op.Holder != "" {
			c.Preferred++
		}
	}
	return c
}

func (c HandOffCounts) String() string {
	return fmt.Sprintf("hand-offs: %d ok, %d lost, %d unknown; %d offers taken by a candidate, %d acquisitions refused during a window; %d preferred attempts found the key held",
		c.OK, c.Lost, c.Unknown, c.Taken, c.Refused, c.Preferred)
}

// checkObservations checks what each observer lane reported, beside the
// model (which checks each state against the key's history): in the
// order of the reads, the token never goes down, unless a fault that lost
// data overlapped the two reads; and a preferred candidate reported is an
// owner that asked to be preferred for the key (an acquire with
// Preferred) before the read returned. It returns the violations and the
// number of states checked.
func checkObservations(history []Op) ([]string, int) {
	var lossy [][2]int64
	byLane := map[string][]Op{}
	var lanes []string
	asked := map[string]int64{} // key NUL owner: the earliest call of a preferred attempt
	for _, op := range history {
		switch {
		case op.Kind == KindFault && op.LostData:
			lossy = append(lossy, [2]int64{op.Call, op.Return})
		case op.Kind == KindObserve && op.Outcome == OK:
			if _, ok := byLane[op.Lane]; !ok {
				lanes = append(lanes, op.Lane)
			}
			byLane[op.Lane] = append(byLane[op.Lane], op)
		case op.Kind == KindAcquire && op.Preferred:
			k := op.Key + "\x00" + op.Owner
			if t, ok := asked[k]; !ok || op.Call < t {
				asked[k] = op.Call
			}
		}
	}
	var (
		problems []string
		n        int
	)
	for _, lane := range lanes {
		ops := byLane[lane]
		slices.SortStableFunc(ops, func(a, b Op) int { return cmp.Compare(a.Call, b.Call) })
		n += len(ops)
		for _, op := range ops {
			if op.PreferredOwner == "" {
				continue
			}
			if t, ok := asked[op.Key+"\x00"+op.PreferredOwner]; !ok || t > op.Return {
				problems = append(problems, fmt.Sprintf("lease %s: observer %s saw %q as the preferred candidate at %s, but no acquire of that owner had asked to be preferred",
					op.Key, lane, op.PreferredOwner, fmtMicros(op.Call)))
			}
		}
		for i := 1; i < len(ops); i++ {
			prev, cur := ops[i-1], ops[i]
			if cur.Out >= prev.Out {
				continue
			}
			if slices.ContainsFunc(lossy, func(f [2]int64) bool { return f[0] < cur.Return && f[1] > prev.Call }) {
				continue
			}
			problems = append(problems, fmt.Sprintf("lease %s: observer %s saw the token go down from %d (%s at %s) to %d (%s at %s) with no fault that lost data",
				cur.Key, lane, prev.Out, prev.Change, fmtMicros(prev.Call), cur.Out, cur.Change, fmtMicros(cur.Call)))
		}
	}
	return problems, n
}
