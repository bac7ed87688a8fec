package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	return &Harness{o: o, rec: rec, lanes: NewLanes("p")}
}

// Recorder returns the harness's recorder.
func (h *Harness) Recorder() *Recorder { return h.rec }

// Start opens the clients and starts their loops.
func (h *Harness) Start(ctx context.Context) error {
	ctx, h.cancel = context.WithCancel(ctx)
	for i := range h.o.Clients {
		w, closeFn, err := newWorker(ctx, workerOptions{
			Name: fmt.Sprintf("chaos-p%d", i), Lanes: h.lanes, Rec: h.rec, Options: h.o, Seed: h.o.Seed*1000 + uint64(i),
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
// that breaks the backend contract), if any.
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

// once makes one round: acquire a key, claim its resource, write and read
// while holding it, then release it or let it expire.
func (w *worker) once(ctx context.Context) error {
	p := w.o.Policy.Options()
	key := w.o.Keys[w.rng.IntN(len(w.o.Keys))]
	h, err := w.acquire(ctx, key, w.o.Policy)
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
	resource := Resource(key)
	write := func(snap lease.Snapshot, value string, late bool, belief bool) Outcome {
		wctx, cancel := context.WithTimeout(ctx, 2*p.OperationTimeout)
		defer cancel()
		wr := Write{Snap: snap, Acq: acq, Resource: resource, Value: value, Late: late}
		if belief {
			wr.Remaining = func() time.Duration { return h.Deadline().Sub(w.o.Clock.Now()) }
		}
		out, _ := w.store.Write(wctx, w.main, wr)
		return out
	}
	holding := func() bool {
		return m.Context().Err() == nil && w.o.Clock.Now().Before(h.Deadline())
	}
	if holding() {
		write(h.Snapshot(), "", false, true)
	}
	until := time.Now().Add(w.randDur(w.o.Hold))
	last := time.Now()
	for ctx.Err() == nil {
		if w.o.LateWrites && time.Since(last) > p.TTL {
			// Paused past the TTL: make the late write first, as a
			// program that was about to write when it was stopped would.
			write(h.Snapshot(), w.value(), true, false)
		}
		if !time.Now().Before(until) || !holding() {
			break
		}
		write(h.Snapshot(), w.value(), false, true)
		if w.rng.IntN(3) == 0 {
			rctx, cancel := context.WithTimeout(ctx, 2*p.OperationTimeout)
			_, _, _ = w.store.Read(rctx, w.main, resource)
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
	if m.Err() == nil && w.rng.IntN(5) != 0 {
		_ = h.Release(WithLane(stopCtx, w.main))
	}
	return nil
}

// acquire calls Client.Acquire on a client with an owner of its own,
// "<name>.r<n>", and records what the call returned as a KindClient
// operation, so that checkClientOutcomes can hold the error to its
// promise: a later answer naming that owner as the holder can only come
// from one of this call's attempts.
func (w *worker) acquire(ctx context.Context, key string, p lease.Policy) (*lease.Handle, error) {
	w.calls++
	owner := fmt.Sprintf("%s.r%d", w.o.Name, w.calls)
	c, err := lease.NewClient(w.rb, lease.ClientOptions{Owner: owner, Clock: w.o.Clock})
	if err != nil {
		return nil, err
	}
	op := Op{Lane: w.main.ID(), Kind: KindClient, Key: key, Owner: owner, Call: w.o.Rec.Now()}
	h, err := c.Acquire(WithLane(ctx, w.main), key, p)
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
	h, err := w.acquire(ctx, key, w.o.Policy)
	if err != nil {
		return err
	}
	defer func() { _ = h.Release(WithLane(context.WithoutCancel(ctx), w.main)) }()
	p := w.o.Policy.Options()
	wctx, cancel := context.WithTimeout(ctx, 10*p.OperationTimeout)
	defer cancel()
	wr := Write{Snap: h.Snapshot(), Acq: w.main.Granted(), Resource: Resource(key), Value: w.value()}
	if out, err := w.store.Write(wctx, w.main, wr); out != OK {
		return fmt.Errorf("fenced write %s: %w", out, err)
	}
	if _, _, err := w.store.Read(wctx, w.main, Resource(key)); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}
