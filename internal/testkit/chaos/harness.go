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

// Open returns the backend and the store of one client, each on
// connections of its own, and a function that closes them. name is the
// client's name, which a backend may pass to the server (PostgreSQL's
// application_name) so that a nemesis can find the client's connections.
type Open func(ctx context.Context, name string) (lease.Backend, Store, func(), error)

// Options configure a Harness.
type Options struct {
	// Keys are the lease keys the clients compete for. Key k fences the
	// resource Resource(k).
	Keys []string
	// Policy is every client's lease policy.
	Policy lease.Policy
	// Clients is the number of goroutine clients. Default 3.
	Clients int
	// Open opens each client's backend and store. Required.
	Open Open
	// Clock is the clients' clock (lease.ClientOptions.Clock). Default
	// the system clock. Operations are timed on the wall clock whatever
	// it is.
	Clock lease.Clock
	// Hold bounds how long a client keeps a lease before releasing it.
	// Default 2×TTL, so that managed renewal runs.
	Hold time.Duration
	// Seed seeds the clients' random choices. Default 1.
	Seed uint64

	// Semaphore, if not "", makes the clients take permits too, of the
	// semaphore of that name among Permits permits
	// (Client.AcquirePermit). A permit holder writes through the fence
	// either per slot (to Resource(permit key), fenced by the permit's
	// key) or per semaphore (to Resource(Semaphore), fenced by the
	// semaphore's key with the permit's token), picked at random each
	// time.
	Semaphore string
	// Permits is the semaphore's number of permits. Default 2.
	Permits int
	// SetSize, if at least 1, makes the clients take sets of keys too:
	// SetSize of Keys picked at random, all or nothing
	// (Client.AcquireSet). A set holder writes to the resource of each of
	// its keys, fenced by that key with the set's token
	// (Handle.SnapshotFor).
	//
	// With Semaphore or SetSize set, each round picks one of the
	// primitives at random: a lease on one of Keys, a permit, or a set.
	SetSize int

	// HandOffs makes the goroutine clients end some rounds on a lease
	// (not a permit or a set) with Handle.HandOff instead of Release: to
	// one to three owner strings of the other clients (first those
	// acquiring the same key at the time, then those they will use next),
	// or now and then to Nobody, for a window of 50ms to the TTL. A
	// holder that hands off first offers the key to its preferred
	// candidate (lease.Record.Preferred), if any, as leaseservice does;
	// a client whose next owner string was offered a key goes for that
	// key, as a successor waiting for it would.
	// With HandOffs, every other goroutine client (chaos-p1, chaos-p3, …)
	// asks to be preferred in its Acquire calls
	// (lease.ClientOptions.Preferred); the attempts record it
	// (Op.Preferred).
	HandOffs bool
	// Observers is the number of observer lanes on each of Keys: each
	// ranges over Client.Observe on the key from Start until
	// StopObservers, and records every state it reports (KindObserve).
	Observers int
}

// Resource returns the name of the resource that lease key fences.
func Resource(key string) string { return "res-" + key }

// Harness runs goroutine clients and records their history.
type Harness struct {
	o     Options
	rec   *Recorder
	lanes *Lanes

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closes []func()
	errs   []error
	mu     sync.Mutex
	roster *roster // with HandOffs

	obsCancel context.CancelFunc
	obsWG     sync.WaitGroup
	obsCloses []func()
	observers []*observer
}

// NewHarness returns a harness recording into rec under the lane prefix
// "p".
func NewHarness(rec *Recorder, o Options) *Harness {
	if o.Clients == 0 {
		o.Clients = 3
	}
	if o.Clock == nil {
		o.Clock = lease.SystemClock()
	}
	if o.Hold == 0 {
		o.Hold = 2 * o.Policy.TTL()
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Semaphore != "" && o.Permits == 0 {
		o.Permits = 2
	}
	o.SetSize = min(o.SetSize, len(o.Keys))
	h := &Harness{o: o, rec: rec, lanes: NewLanes("p")}
	if o.HandOffs {
		h.roster = &roster{}
	}
	return h
}

// Recorder returns the harness's recorder.
func (h *Harness) Recorder() *Recorder { return h.rec }

// Start opens the clients and starts their loops, and the observers.
func (h *Harness) Start(ctx context.Context) error {
	if err := h.startObservers(ctx); err != nil {
		h.stopObservers()
		return err
	}
	ctx, h.cancel = context.WithCancel(ctx)
	for i := range h.o.Clients {
		w, closeFn, err := newWorker(ctx, workerOptions{
			Name: fmt.Sprintf("chaos-p%d", i), Lanes: h.lanes, Rec: h.rec, Options: h.o, Seed: h.o.Seed*1000 + uint64(i),
			roster: h.roster, preferred: h.o.HandOffs && i%2 == 1,
		})
		if err != nil {
			h.cancel()
			h.Stop()
			return err
		}
		h.closes = append(h.closes, closeFn)
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			if err := w.run(ctx); err != nil {
				h.mu.Lock()
				h.errs = append(h.errs, err)
				h.mu.Unlock()
			}
		}()
	}
	return nil
}

// Stop stops the clients, waits for their loops and closes their
// connections. It returns an error a client could not handle (an error
// that breaks the backend contract), if any. The observers go on until
// StopObservers.
func (h *Harness) Stop() error {
	if h.cancel != nil {
		h.cancel()
	}
	h.wg.Wait()
	for _, c := range h.closes {
		c()
	}
	h.closes = nil
	h.mu.Lock()
	defer h.mu.Unlock()
	return errors.Join(h.errs...)
}

// Fault records a fault from its start to its end around inject.
func (h *Harness) Fault(desc string, lostData bool, inject func()) {
	h.FaultOp(Op{Fault: desc, LostData: lostData}, inject)
}

// FaultOp records the fault op (its Fault, LostData and EndsLeases set)
// from its start to its end around inject.
func (h *Harness) FaultOp(op Op, inject func()) {
	op.Kind, op.Call = KindFault, h.rec.Now()
	inject()
	op.Return = h.rec.Now()
	op.Outcome = OK
	h.rec.Add(op)
}

// Converge checks that the clients' keys can be had after the faults
// healed: a fresh client acquires every key (waiting up to wait for each),
// claims its resource, reads it and releases it, all recorded. It returns
// an error naming the keys it could not acquire or claim.
func (h *Harness) Converge(ctx context.Context, wait time.Duration) error {
	p, err := lease.NewPolicy(withWait(h.o.Policy.Options(), wait))
	if err != nil {
		return err
	}
	o := h.o
	o.Policy = p
	w, closeFn, err := newWorker(ctx, workerOptions{Name: "chaos-final", Lanes: NewLanes("final"), Rec: h.rec, Options: o, Seed: 7})
	if err != nil {
		return err
	}
	defer closeFn()
	var errs []error
	for _, key := range h.o.Keys {
		if err := w.converge(ctx, key); err != nil {
			errs = append(errs, fmt.Errorf("key %q: %w", key, err))
		}
	}
	if h.o.Semaphore != "" {
		if err := w.convergePermits(ctx, wait); err != nil {
			errs = append(errs, fmt.Errorf("semaphore %q: %w", h.o.Semaphore, err))
		}
	}
	if h.o.SetSize > 0 {
		if err := w.convergeSet(ctx); err != nil {
			errs = append(errs, fmt.Errorf("set %q: %w", h.o.Keys, err))
		}
	}
	return errors.Join(errs...)
}

func withWait(o lease.PolicyOptions, wait time.Duration) lease.PolicyOptions {
	o.Wait, o.MaxAttempts = wait, 0
	return o
}

// workerOptions configure one client loop.
type workerOptions struct {
	Options
	Name  string
	Lanes *Lanes
	Rec   *Recorder
	Seed  uint64
	// LateWrites makes the client, when it finds it was paused for longer
	// than the TTL while holding a lease, first write with the snapshot it
	// held before the pause, without checking the lease: the write a
	// process makes when it resumes after a GC pause or SIGSTOP.
	LateWrites bool
	// roster is where the client says which owner string it acquires
	// with, and finds candidates for its hand-offs (with HandOffs).
	roster *roster
	// preferred makes the client ask to be preferred
	// (lease.ClientOptions.Preferred).
	preferred bool
}

// worker is one client: its lanes, backend, store and random choices.
type worker struct {
	o     workerOptions
	main  *Lane // acquire, release, writes and reads
	renew *Lane // managed renewals
	rb    *RecordingBackend
	store *RecordingStore
	rng   *rand.Rand
	seq   int
	calls int // Client.Acquire calls made
}

// openTimeout bounds how long a client keeps trying to connect: a child
// may start in the middle of a fault.
const openTimeout = 30 * time.Second

func newWorker(ctx context.Context, o workerOptions) (*worker, func(), error) {
	deadline := time.Now().Add(openTimeout)
	b, s, closeFn, err := o.Open(ctx, o.Name)
	for err != nil && ctx.Err() == nil && time.Now().Before(deadline) {
		sleep(ctx, 100*time.Millisecond)
		b, s, closeFn, err = o.Open(ctx, o.Name)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open client %s: %w", o.Name, err)
	}
	w := &worker{o: o, main: o.Lanes.New(), renew: o.Lanes.New(), rng: rand.New(rand.NewPCG(o.Seed, 0x5eed))}
	w.rb = NewRecordingBackend(b, o.Rec, w.main)
	w.store = NewRecordingStore(s, o.Rec)
	return w, closeFn, nil
}

// run loops until ctx ends. It returns an error only for a result that
// breaks the rules of package lease.
func (w *worker) run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := w.once(ctx); err != nil {
			return err
		}
	}
	return nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (w *worker) randDur(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(w.rng.Int64N(int64(d)))
}

// fenced is one resource a round writes to: the resource of key, fenced
// by key with the handle's token (Handle.SnapshotFor), and how (see
// Op.Fence).
type fenced struct{ key, fence string }

// once makes one round: acquire a key (or a permit, or a set), claim its
// resources, write and read while holding it, then release it, let it
// expire or (with HandOffs, a lease only) hand it off.
func (w *worker) once(ctx context.Context) error {
	p := w.o.Policy.Options()
	h, plan, err := w.take(ctx, w.o.Policy)
	if err != nil {
		sleep(ctx, w.randDur(p.Retry))
		return nil
	}
	acq := w.main.Granted()
	m, err := h.StartManaged(WithLane(ctx, w.renew))
	if err != nil {
		// The local deadline passed since the grant (the process was
		// paused): it must not act as holder; hand the lease back.
		w.event(h, "StartManaged refused", err)
		_ = h.Release(WithLane(context.WithoutCancel(ctx), w.main))
		return nil
	}
	write := func(f fenced, value string, late bool, belief bool) Outcome {
		wctx, cancel := context.WithTimeout(ctx, 2*p.OperationTimeout)
		defer cancel()
		snap, err := h.SnapshotFor(f.key)
		if err != nil {
			return Failed // not reached: the plan names only keys of h
		}
		wr := Write{Snap: snap, Acq: acq, Resource: Resource(f.key), Value: value, Late: late, Lease: h.Key(), Fence: f.fence}
		if belief {
			wr.Remaining = func() time.Duration { return h.Deadline().Sub(w.o.Clock.Now()) }
		}
		out, _ := w.store.Write(wctx, w.main, wr)
		return out
	}
	holding := func() bool {
		return m.Context().Err() == nil && w.o.Clock.Now().Before(h.Deadline())
	}
	for _, f := range plan {
		if holding() {
			write(f, "", false, true)
		}
	}
	until := time.Now().Add(w.randDur(w.o.Hold))
	last := time.Now()
	for ctx.Err() == nil {
		if w.o.LateWrites && time.Since(last) > p.TTL {
			// Paused past the TTL: make the late write first, as a
			// program that was about to write when it was stopped would.
			for _, f := range plan {
				write(f, w.value(), true, false)
			}
		}
		if !time.Now().Before(until) || !holding() {
			break
		}
		for _, f := range plan {
			write(f, w.value(), false, true)
		}
		if w.rng.IntN(3) == 0 {
			rctx, cancel := context.WithTimeout(ctx, 2*p.OperationTimeout)
			_, _, _ = w.store.Read(rctx, w.main, Resource(plan[w.rng.IntN(len(plan))].key))
			cancel()
		}
		last = time.Now()
		sleep(ctx, w.randDur(p.RenewEvery))
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*p.TTL)
	defer cancel()
	_ = m.Stop(stopCtx)
	if err := m.Err(); err != nil {
		w.event(h, "managed reported the loss", err)
		if !errors.Is(err, lease.ErrLost) {
			return fmt.Errorf("%s: Managed.Err does not match lease.ErrLost: %w", w.o.Name, err)
		}
	}
	if m.Err() == nil && w.o.HandOffs && w.o.roster != nil && plan[0].fence == "" && w.rng.IntN(2) == 0 {
		ms := int(p.TTL / time.Millisecond)
		cands := w.o.roster.candidates(w.o.Name, h.Key(), w.rng)
		ictx, icancel := context.WithTimeout(stopCtx, 2*p.OperationTimeout)
		if r, err := w.rb.Inspect(ictx, h.Key()); err == nil && r.Preferred != "" && !slices.Contains(cands, r.Preferred) {
			cands = append([]string{r.Preferred}, cands[:min(len(cands), 2)]...) // the preferred first, as leaseservice does
		}
		icancel()
		o := lease.Offer{Candidates: cands,
			Window: time.Duration(min(50, ms)+w.rng.IntN(max(ms-50, 0)+1)) * time.Millisecond}
		w.o.roster.offer(h.Key(), cands)
		_ = h.HandOff(WithLane(stopCtx, w.main), o)
		return nil
	}
	if m.Err() == nil && w.rng.IntN(5) != 0 {
		_ = h.Release(WithLane(stopCtx, w.main))
	}
	return nil
}

// take acquires what one round holds, picked at random among the
// primitives of the options: a lease on one of the keys, a permit of the
// semaphore, or a set of keys. It returns the handle and the resources
// to write to under it.
func (w *worker) take(ctx context.Context, p lease.Policy) (*lease.Handle, []fenced, error) {
	kinds := []string{"lease"}
	if w.o.Semaphore != "" {
		kinds = append(kinds, "permit")
	}
	if w.o.SetSize > 0 {
		kinds = append(kinds, "set")
	}
	kind := kinds[0]
	if len(kinds) > 1 {
		kind = kinds[w.rng.IntN(len(kinds))]
	}
	switch kind {
	case "permit":
		sem := w.o.Semaphore
		h, err := w.acquire(ctx, sem, func(ctx context.Context, c *lease.Client) (*lease.Handle, error) {
			return c.AcquirePermit(ctx, sem, w.o.Permits, p)
		})
		if err != nil {
			return nil, nil, err
		}
		if w.rng.IntN(2) == 0 {
			return h, []fenced{{h.Key(), FenceSlot}}, nil
		}
		return h, []fenced{{sem, FenceSemaphore}}, nil
	case "set":
		var keys []string
		for _, i := range w.rng.Perm(len(w.o.Keys))[:w.o.SetSize] {
			keys = append(keys, w.o.Keys[i])
		}
		slices.Sort(keys)
		h, err := w.acquire(ctx, strings.Join(keys, ","), func(ctx context.Context, c *lease.Client) (*lease.Handle, error) {
			return c.AcquireSet(ctx, keys, p)
		})
		if err != nil {
			return nil, nil, err
		}
		var plan []fenced
		for _, k := range h.Keys() {
			plan = append(plan, fenced{k, FenceSet})
		}
		return h, plan, nil
	}
	key := w.o.Keys[w.rng.IntN(len(w.o.Keys))]
	if k, ok := w.o.roster.offeredTo(fmt.Sprintf("%s.r%d", w.o.Name, w.calls+1)); ok {
		key = k // the owner string of this call was offered k: go for it
	}
	h, err := w.acquireLease(ctx, key, p)
	if err != nil {
		return nil, nil, err
	}
	return h, []fenced{{key, ""}}, nil
}

// acquireLease acquires the lease on key; see acquire.
func (w *worker) acquireLease(ctx context.Context, key string, p lease.Policy) (*lease.Handle, error) {
	return w.acquire(ctx, key, func(ctx context.Context, c *lease.Client) (*lease.Handle, error) {
		return c.Acquire(ctx, key, p)
	})
}

// acquire calls take (Client.Acquire, AcquirePermit or AcquireSet) on a
// client with an owner of its own, "<name>.r<n>", and records what the
// call returned as a KindClient operation on name (the key, the
// semaphore's key or the set's joined keys), so that
// checkClientOutcomes can hold the error to its promise: a later answer
// naming that owner as the holder can only come from one of this call's
// attempts.
func (w *worker) acquire(ctx context.Context, name string, take func(context.Context, *lease.Client) (*lease.Handle, error)) (*lease.Handle, error) {
	w.calls++
	owner := fmt.Sprintf("%s.r%d", w.o.Name, w.calls)
	c, err := lease.NewClient(w.rb, lease.ClientOptions{Owner: owner, Clock: w.o.Clock, Preferred: w.o.preferred})
	if err != nil {
		return nil, err
	}
	key := name
	if strings.Contains(name, ",") || name == w.o.Semaphore {
		key = "" // a set's or a permit's: no hand-off is for it
	}
	w.o.roster.set(w.o.Name, owner, key)
	defer w.o.roster.set(w.o.Name, fmt.Sprintf("%s.r%d", w.o.Name, w.calls+1), "")
	op := Op{Lane: w.main.ID(), Kind: KindClient, Key: name, Owner: owner, Call: w.o.Rec.Now()}
	h, err := take(WithLane(ctx, w.main), c)
	op.Return = w.o.Rec.Now()
	op.Err = errText(err)
	switch {
	case err == nil:
		op.Outcome, op.Token = OK, uint64(h.Token())
	case errors.Is(err, lease.ErrIndeterminate):
		op.Outcome = Unknown
	default:
		op.Outcome = Failed
	}
	w.o.Rec.Add(op)
	return h, err
}

// OwnerName returns the client name in an owner string of the harness
// ("chaos-p0" of "chaos-p0.r12"): the application_name of its
// PostgreSQL sessions.
func OwnerName(owner string) string {
	name, _, _ := strings.Cut(owner, ".r")
	return name
}

// event records something the client observed.
func (w *worker) event(h *lease.Handle, what string, err error) {
	w.o.Rec.Add(Op{Lane: w.main.ID(), Kind: KindEvent, Key: h.Key(), Token: uint64(h.Token()), Fault: what,
		Err: errText(err), Outcome: OK, Call: w.o.Rec.Now(), Return: w.o.Rec.Now()})
}

// value returns a value no other write has.
func (w *worker) value() string {
	w.seq++
	return fmt.Sprintf("%s#%d", w.o.Name, w.seq)
}

// converge acquires key, claims and reads its resource, and releases it.
func (w *worker) converge(ctx context.Context, key string) error {
	h, err := w.acquireLease(ctx, key, w.o.Policy)
	if err != nil {
		return err
	}
	defer func() { _ = h.Release(WithLane(context.WithoutCancel(ctx), w.main)) }()
	return w.writeRead(ctx, h, w.main.Granted(), fenced{key, ""})
}

// writeRead writes a value to the resource of f under h, whose
// acquisition id is acq, and reads it back.
func (w *worker) writeRead(ctx context.Context, h *lease.Handle, acq string, f fenced) error {
	p := w.o.Policy.Options()
	wctx, cancel := context.WithTimeout(ctx, 10*p.OperationTimeout)
	defer cancel()
	snap, err := h.SnapshotFor(f.key)
	if err != nil {
		return err
	}
	wr := Write{Snap: snap, Acq: acq, Resource: Resource(f.key), Value: w.value(), Lease: h.Key(), Fence: f.fence}
	if out, err := w.store.Write(wctx, w.main, wr); out != OK {
		return fmt.Errorf("fenced write to %s %s: %w", wr.Resource, out, err)
	}
	if _, _, err := w.store.Read(wctx, w.main, Resource(f.key)); err != nil {
		return fmt.Errorf("read %s: %w", wr.Resource, err)
	}
	return nil
}

// convergePermits acquires every permit of the semaphore at once (each
// waiting up to wait, for a TTL that outlasts the others' waits), writes
// to the resource of each slot and, with the newest permit, to the
// semaphore's, reads them back, and releases the permits.
func (w *worker) convergePermits(ctx context.Context, wait time.Duration) error {
	o := withWait(w.o.Policy.Options(), wait)
	o.TTL = time.Duration(w.o.Permits)*wait + o.TTL
	p, err := lease.NewPolicy(o)
	if err != nil {
		return err
	}
	sem := w.o.Semaphore
	type held struct {
		h   *lease.Handle
		acq string
	}
	var hs []held
	defer func() {
		for _, x := range hs {
			_ = x.h.Release(WithLane(context.WithoutCancel(ctx), w.main))
		}
	}()
	for range w.o.Permits {
		h, err := w.acquire(ctx, sem, func(ctx context.Context, c *lease.Client) (*lease.Handle, error) {
			return c.AcquirePermit(ctx, sem, w.o.Permits, p)
		})
		if err != nil {
			return fmt.Errorf("permit %d of %d: %w", len(hs)+1, w.o.Permits, err)
		}
		hs = append(hs, held{h, w.main.Granted()})
	}
	for _, x := range hs {
		if err := w.writeRead(ctx, x.h, x.acq, fenced{x.h.Key(), FenceSlot}); err != nil {
			return err
		}
	}
	newest := slices.MaxFunc(hs, func(a, b held) int { return cmp.Compare(a.h.Token(), b.h.Token()) })
	return w.writeRead(ctx, newest.h, newest.acq, fenced{sem, FenceSemaphore})
}

// convergeSet acquires every key as one set, writes to the resource of
// each, reads it back, and releases the set.
func (w *worker) convergeSet(ctx context.Context) error {
	keys := w.o.Keys
	h, err := w.acquire(ctx, strings.Join(keys, ","), func(ctx context.Context, c *lease.Client) (*lease.Handle, error) {
		return c.AcquireSet(ctx, keys, w.o.Policy)
	})
	if err != nil {
		return err
	}
	defer func() { _ = h.Release(WithLane(context.WithoutCancel(ctx), w.main)) }()
	acq := w.main.Granted()
	for _, k := range h.Keys() {
		if err := w.writeRead(ctx, h, acq, fenced{k, FenceSet}); err != nil {
			return err
		}
	}
	return nil
}
