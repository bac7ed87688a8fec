package leasequeue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue/internal/health"
)

// Defaults of Options.
const (
	// DefaultMaxAttempts is the number of attempts an item gets when
	// Options.MaxAttempts is 0.
	DefaultMaxAttempts = 5
)

// DefaultRetryDelay is the pause before an item is retried after its
// attempt-th failed attempt when Options.RetryDelay is nil: one second,
// doubling with each attempt, at most ten minutes.
func DefaultRetryDelay(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	if attempt > 11 {
		return 10 * time.Minute
	}
	return min(time.Second<<(attempt-1), 10*time.Minute)
}

// Options configure a Queue. Name and Policy are required.
type Options struct {
	// Name names the queue. Item id is claimed under the lease key
	// Name + "/items/" + I (see Queue.Key), which must pass
	// lease.ValidateKey. No two queues or groups share a lease key, but a
	// lease key of your own can meet theirs: keep it out of their names.
	Name string

	// Policy is the policy of the items' leases: its TTL is how long an
	// item whose worker died stays claimed. Required.
	Policy lease.Policy

	// Concurrency is the number of items Run processes at once. Default 1.
	Concurrency int

	// MaxAttempts is the number of attempts an item gets: after the last
	// one fails, or when a claim would begin one more (its workers died
	// while running it), the item goes to the dead-letter state. Default
	// DefaultMaxAttempts.
	MaxAttempts int

	// RetryDelay returns how long an item stays hidden after its
	// attempt-th attempt failed. Default DefaultRetryDelay.
	RetryDelay func(attempt int) time.Duration

	// PollEvery is how long Run waits before asking the source again when
	// it had no ready item. Default the smaller of one second and TTL/4.
	PollEvery time.Duration

	// Observer receives the queue's events. Default NopObserver.
	Observer Observer

	// PruneEvery is how often, at most, Run removes the source's finished
	// items that outlived their retention (see Prune), if the source is a
	// lease.Sweeper, as the ready-made sources are. Run does it in the
	// background, under the lease PruneKey taken with TryAcquire on the
	// queue's lease client, so that one worker across all replicas prunes
	// at a time: the first time between half of and one PruneEvery after
	// Run starts, then every PruneEvery while it runs. Each prune is
	// reported with a Pruned event, errors included; a worker that finds
	// another one pruning skips its turn silently. Default
	// DefaultPruneEvery (an hour); negative never prunes in the
	// background.
	PruneEvery time.Duration
}

// Handler processes one claimed item. ctx is the claim's context: it is
// cancelled when the claim's lease is lost or Run's context ends. When the
// handler returns nil, Run completes the claim; when it returns an error,
// Run fails it (or, if Run's context ended, releases it). A handler may
// also complete, fail or release the claim itself, for example with
// PostgresSource.CompleteTx, and Run then leaves it alone.
type Handler func(ctx context.Context, c *Claim) error

// A Queue claims items of a Source for one worker, each under its own
// lease, and processes them with Run or hands them out with Claim. Create
// it with New; its methods are safe for concurrent use. The workers of a
// queue are Queues with the same Name and Source in several processes.
type Queue struct {
	client *lease.Client
	src    Source
	o      Options
	prefix string // keyPrefix
	obs    Observer
	clock  lease.Clock
	track  health.Tracker[*Claim]

	items *lease.Client // the client of the items' claims (see itemBackend)

	running atomic.Bool
	crashed atomic.Bool
	mu      sync.Mutex
	stop    context.CancelCauseFunc // of the running Run
}

// New returns a Queue that claims the items of src with client's leases.
// It validates its arguments; it does no I/O.
func New(client *lease.Client, src Source, o Options) (*Queue, error) {
	switch {
	case client == nil:
		return nil, errors.New("leasequeue: New: nil Client")
	case src == nil:
		return nil, errors.New("leasequeue: New: nil Source")
	case o.Policy.TTL() == 0:
		return nil, fmt.Errorf("leasequeue: New: %w: the zero Policy; build one with lease.NewPolicy", lease.ErrInvalidPolicy)
	case o.Concurrency < 0:
		return nil, fmt.Errorf("leasequeue: New: Concurrency (%d) must not be negative", o.Concurrency)
	case o.MaxAttempts < 0:
		return nil, fmt.Errorf("leasequeue: New: MaxAttempts (%d) must not be negative", o.MaxAttempts)
	case o.PollEvery < 0:
		return nil, fmt.Errorf("leasequeue: New: PollEvery (%v) must not be negative", o.PollEvery)
	}
	if err := lease.ValidateKey(itemKey(o.Name, "x")); o.Name == "" || err != nil {
		return nil, fmt.Errorf("leasequeue: New: Name %q does not make valid lease keys: %v", o.Name, err)
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.RetryDelay == nil {
		o.RetryDelay = DefaultRetryDelay
	}
	if o.PollEvery == 0 {
		o.PollEvery = min(time.Second, o.Policy.TTL()/4)
	}
	if o.PruneEvery == 0 {
		o.PruneEvery = DefaultPruneEvery
	}
	q := &Queue{client: client, src: src, o: o, prefix: itemKey(o.Name, ""), obs: o.Observer, clock: client.Clock()}
	if q.obs == nil {
		q.obs = NopObserver
	}
	// The claims' lease events (renewals, losses, releases) go to the
	// observer of the caller's client.
	items, err := lease.NewClient(itemBackend{src: src, prefix: q.keyPrefix()},
		lease.ClientOptions{Owner: client.Owner(), Clock: q.clock, Observer: itemObserver{client.Observer(), q}})
	if err != nil {
		return nil, fmt.Errorf("leasequeue: New: %w", err)
	}
	q.items = items
	return q, nil
}

// itemKey returns the lease key of item id of queue name.
func itemKey(name, id string) string { return keyspace.LeaseKey(name+"/", keyspace.QueueItem, id) }

// keyPrefix returns the lease key of an item without its escaped ID.
func (q *Queue) keyPrefix() string { return q.prefix }

// Key returns the lease key of item id: Name + "/items/" + the ID with
// '%', '{', '}' and '/' written as %25, %7B, %7D and %2F, so that no two
// items of any queues share a lease ("a"[b/items/c] is a/items/b%2Fitems%2Fc,
// "a/items/b"[c] is a/items/b/items/c).
func (q *Queue) Key(id string) string { return itemKey(q.o.Name, id) }

// Claim claims item id for the caller, in one request: the item is its
// own lease, and the claim begins an attempt at it with a new token. Then
// it starts renewing the claim. The caller must end the claim with
// Complete, Fail or Release.
//
// It fails with a *lease.NotAcquiredError if another worker holds the
// item; an error matching ErrFinished if the item is done or dead, or was
// just moved to the dead-letter state because this attempt would exceed
// MaxAttempts; ErrNotFound if the source does not know it; ErrUnhealthy
// while a renewal of one of the queue's claims is overdue; or the lease's
// or the source's error.
func (q *Queue) Claim(ctx context.Context, id string) (*Claim, error) {
	return q.claim(ctx, detach(ctx), id)
}

// detach returns ctx without its cancellation (context.WithoutCancel), or
// ctx itself if it has none.
func detach(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// claim claims item id as Claim does; detached is ctx without its
// cancellation.
func (q *Queue) claim(ctx, detached context.Context, id string) (*Claim, error) {
	key := q.Key(id)
	if err := lease.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("leasequeue: item %q: %w", id, err)
	}
	if !q.track.Healthy(q.clock.Now()) {
		return nil, ErrUnhealthy
	}
	start := q.clock.Now()
	r := q.claimRequest()
	g, err := q.src.claimID(ctx, r, id)
	if err != nil {
		return nil, err
	}
	return q.adopt(ctx, detached, r, g, start)
}

// open starts renewing the lease h of item id, whose attempt b began, and
// returns the claim; it releases h if it cannot. detached is ctx without
// its cancellation.
func (q *Queue) open(ctx, detached context.Context, h *lease.Handle, id string, b begun, start time.Time) (*Claim, error) {
	attempt := b.Attempt
	c := &Claim{q: q, id: id, h: h, attempt: attempt, claimed: start}
	// The items' observer cancels the claim's context on loss (see
	// itemObserver), and the claim's end with ErrClosed.
	c.ctx, c.cancel = context.WithCancelCause(detached)
	// Tracked before its renewer starts, so that the items' observer
	// finds it, context and all, should the lease be lost at once.
	q.track.Add(h, id, c)
	m, err := h.StartManaged(detached)
	if err != nil {
		// The local deadline passed while the attempt began: the claim
		// would be born lost.
		q.track.Remove(h)
		c.cancel(ErrClosed)
		_ = h.Release(detached)
		return nil, err
	}
	c.m = m
	q.emit(&Claimed{EventInfo: c.info(nil), Attempt: attempt, Age: b.Age})
	if attempt > q.o.MaxAttempts {
		cause := fmt.Errorf("%w: attempt %d of at most %d", ErrTooManyAttempts, attempt, q.o.MaxAttempts)
		if err := c.fail(ctx, failRecord{Err: cause, Dead: true}); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: item %q moved to the dead-letter state: %w", ErrFinished, id, cause)
	}
	return c, nil
}

// failure returns the failure of the attempt-th attempt.
func (q *Queue) failure(attempt int, cause error) failRecord {
	if attempt >= q.o.MaxAttempts {
		return failRecord{Err: cause, Dead: true}
	}
	return failRecord{Err: cause, RetryAfter: max(q.o.RetryDelay(attempt), 0)}
}

// Run claims ready items of the source and processes each with handler,
// up to Options.Concurrency at a time, until ctx ends. It claims as many
// items as it has free slots, in one request, and runs handler under each
// claim; after handler returns it completes, fails or releases the claim
// (see Handler). While a renewal of one of its claims is overdue it claims
// nothing (a sick worker takes no new work); when the source has no ready
// item it waits Options.PollEvery. An item whose worker died is claimed
// again as soon as its claim has expired.
//
// Run also prunes the source's finished items that outlived their
// retention, in the background, about every Options.PruneEvery, one
// worker across all replicas at a time (see Prune).
//
// When ctx ends, Run cancels the handlers' contexts and returns after
// every handler has returned and its claim was closed, and a prune under
// way has stopped. It returns nil then; errors of single items and of
// prunes are reported to the Observer. A Queue runs at most one Run at a
// time.
func (q *Queue) Run(ctx context.Context, handler Handler) error {
	if handler == nil {
		return errors.New("leasequeue: Run: nil Handler")
	}
	if !q.running.CompareAndSwap(false, true) {
		return errors.New("leasequeue: Run is already running")
	}
	defer q.running.Store(false)
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	q.mu.Lock()
	q.stop = stop
	q.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { q.monitor(runCtx) })
	if q.pruning() {
		wg.Go(func() { q.pruneLoop(runCtx) })
	}
	// Concurrency workers take the items: each slot reserved is a worker
	// that is free or about to be, so a send to jobs waits for no item.
	h := &handlers{detached: context.WithoutCancel(runCtx), open: make(map[*Claim]struct{}, q.o.Concurrency)}
	stopCancel := context.AfterFunc(runCtx, func() { h.end(context.Cause(runCtx)) })
	defer stopCancel()
	slots := make(chan struct{}, q.o.Concurrency)
	jobs := make(chan *Claim)
	for range q.o.Concurrency {
		wg.Go(func() {
			for c := range jobs {
				q.work(runCtx, h, c, handler)
				<-slots
			}
		})
	}
	for {
		n := reserve(runCtx, slots)
		if n == 0 {
			break
		}
		cs, err := q.claimNext(runCtx, h.detached, n)
		if err != nil && !errors.Is(err, ErrUnhealthy) && runCtx.Err() == nil {
			q.emit(&Claimed{EventInfo: EventInfo{Name: q.o.Name, Worker: q.client.Owner(), Err: err}})
		}
		for _, c := range cs {
			jobs <- c
		}
		got := len(cs)
		for range n - got {
			<-slots
		}
		if got == 0 && health.Sleep(runCtx, q.clock, q.o.PollEvery) != nil {
			break
		}
	}
	close(jobs)
	wg.Wait()
	return nil
}

// handlers are the claims whose handlers Run is running, whose contexts
// it cancels when its own context ends.
type handlers struct {
	detached context.Context // Run's context without its cancellation

	mu    sync.Mutex
	cause error // Run's context's cause, once it ended
	open  map[*Claim]struct{}
}

// add adds c, or cancels it at once if Run's context has ended.
func (h *handlers) add(c *Claim) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cause != nil {
		c.cancel(h.cause)
		return
	}
	h.open[c] = struct{}{}
}

func (h *handlers) remove(c *Claim) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.open, c)
}

// end cancels every open claim with cause, and every claim added later.
func (h *handlers) end(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cause = cause
	for c := range h.open {
		c.cancel(cause)
	}
	clear(h.open)
}

// reserve waits for a free slot and takes every other free one; it returns
// how many it took, or 0 when ctx ended.
func reserve(ctx context.Context, slots chan struct{}) int {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for n < cap(slots) {
		select {
		case slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

// work runs handler under claim c, and closes c as Run's doc says.
func (q *Queue) work(runCtx context.Context, hs *handlers, c *Claim, handler Handler) {
	hs.add(c)
	defer hs.remove(c)
	err := call(handler, c)
	switch {
	case q.crashed.Load():
		c.abandon()
		return
	case c.isClosed():
		return // the handler closed the claim itself
	}
	// Record the outcome for as long as the lease may live, even after
	// Run's context ended.
	fctx, cancel := context.WithTimeout(hs.detached, q.o.Policy.LocalLifetime())
	defer cancel()
	switch {
	case c.m.Err() != nil:
		// Lost: nothing may be written. Release in case the backend was
		// only unreachable and still shows the claim.
		if c.close() {
			c.end(fctx, true)
		}
	case err == nil:
		_ = c.Complete(fctx)
	case runCtx.Err() != nil:
		_ = c.Release(fctx) // shut down mid-item: not the item's failure
	default:
		_ = c.Fail(fctx, err)
	}
}

// call runs handler, turning a panic into an error.
func call(handler Handler, c *Claim) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("leasequeue: handler of item %q panicked: %v\n%s", c.id, r, debug.Stack())
		}
	}()
	return handler(c.ctx, c)
}

// monitor emits heartbeats for the queue's claims until ctx ends.
func (q *Queue) monitor(ctx context.Context) {
	every := q.o.Policy.Options().RenewEvery / 2
	info := EventInfo{Name: q.o.Name, Worker: q.client.Owner()}
	for health.Sleep(ctx, q.clock, every) == nil {
		for _, e := range q.track.Beat(q.clock.Now(), info, ErrUnhealthy) {
			q.emit(e)
		}
	}
}

func (q *Queue) emit(e Event) { q.obs.Observe(e) }

// crash stops Run as a crashed process would: claims are neither renewed,
// released nor written again.
func (q *Queue) crash() {
	q.crashed.Store(true)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stop != nil {
		q.stop(errCrashed)
	}
}

var errCrashed = errors.New("leasequeue: crashed (test)")
