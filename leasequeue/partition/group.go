package partition

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/internal/observe"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue/internal/health"
	"github.com/golib/lease/leasequeue/queueevent"
)

// ErrRevoked is the cause of a partition handler's context when the
// worker gives the partition up to rebalance the group.
var ErrRevoked = errors.New("partition: partition revoked")

// errUnhealthy is the error of a Heartbeat whose renewal is overdue.
var errUnhealthy = errors.New("partition: lease renewals are failing; taking no new partitions")

// Options configure a Group. Name, Partitions, Policy and Roster are
// required.
type Options struct {
	// Name names the group. Worker w's membership lease is
	// Name + "/members/" + W and partition p's lease is
	// Name + "/partitions/" + P, where W and P are w and p with '%', '{',
	// '}' and '/' written as %25, %7B, %7D and %2F; both must pass
	// lease.ValidateKey. No two groups or queues share a lease key, but a
	// lease key of your own can meet theirs: keep it out of their names.
	Name string

	// Worker names this worker in the group; every worker of a group needs
	// its own name. Default the lease client's owner.
	Worker string

	// Partitions are the names of the group's partitions. Every worker of a
	// group must be given the same ones. Required; no duplicates.
	Partitions []string

	// Policy is the policy of the membership and partition leases: a
	// worker that dies loses its partitions within its TTL. Required.
	Policy lease.Policy

	// Roster records the group's worker names (see Roster). Required.
	Roster Roster

	// RebalanceEvery is how often the worker looks at the live members and
	// takes or gives up partitions. Default the policy's RenewEvery.
	RebalanceEvery time.Duration

	// Observer receives the group's events: *queueevent.Assigned,
	// *queueevent.Revoked, *queueevent.Rebalanced, *queueevent.Lost and
	// *queueevent.Heartbeat (leasequeue.NewSlogObserver logs them).
	// Default none.
	Observer queueevent.Observer
}

// Owned is one partition owned by a worker, as its handler gets it.
type Owned struct {
	// Name is the partition's name.
	Name string
	// Snapshot holds the partition lease's key and fencing token: pass it
	// to every write the handler makes for the partition (see package
	// fence), so that a worker that lost the partition can't write.
	Snapshot lease.Snapshot
}

// Func works on one owned partition until ctx is cancelled: with
// cause ErrRevoked when the worker gives the partition up to rebalance the
// group, a cause wrapping lease.ErrLost when the partition's lease was
// lost, or the cause of Group.Run's context on shutdown. It must then
// return promptly: the partition's next owner starts only after it has
// returned (or, after a loss, after the lease has expired). If it returns
// by itself, the worker gives the partition up, and may take it again at
// a later rebalance.
type Func func(ctx context.Context, p Owned) error

// A Group shares a set of named partitions among the live workers of a
// group, evenly, with one lease per partition. Create it with New and run
// it with Run; its methods are safe for concurrent use.
type Group struct {
	client *lease.Client
	o      Options
	obs    queueevent.Observer
	clock  lease.Clock
	track  health.Tracker[struct{}]
	join   lease.Policy // Policy with a Wait of at least one TTL
	order  []string     // partitions in this worker's order of preference
	rank   map[string]int

	running atomic.Bool
	wake    chan struct{}

	mu      sync.Mutex
	owned   map[string]*ownership
	members []string
	target  int
}

// ownership is one owned partition.
type ownership struct {
	name     string
	h        *lease.Handle
	m        *lease.Managed
	cancel   context.CancelCauseFunc
	revoking bool
}

// New returns a Group of workers that own partitions with client's
// leases. It validates its arguments; it does no I/O.
func New(client *lease.Client, o Options) (*Group, error) {
	switch {
	case client == nil:
		return nil, errors.New("partition: New: nil Client")
	case o.Roster == nil:
		return nil, errors.New("partition: New: nil Roster")
	case o.Policy.TTL() == 0:
		return nil, fmt.Errorf("partition: New: %w: the zero Policy; build one with lease.NewPolicy", lease.ErrInvalidPolicy)
	case len(o.Partitions) == 0:
		return nil, errors.New("partition: New: no Partitions")
	case o.RebalanceEvery < 0:
		return nil, fmt.Errorf("partition: New: RebalanceEvery (%v) must not be negative", o.RebalanceEvery)
	}
	if o.Worker == "" {
		o.Worker = client.Owner()
	}
	if o.Name == "" {
		return nil, errors.New("partition: New: empty Name")
	}
	if err := lease.ValidateKey(memberKey(o.Name, o.Worker)); err != nil {
		return nil, fmt.Errorf("partition: New: Name %q and Worker %q: %w", o.Name, o.Worker, err)
	}
	o.Partitions = slices.Clone(o.Partitions)
	seen := make(map[string]bool)
	for _, p := range o.Partitions {
		if err := lease.ValidateKey(partitionKey(o.Name, p)); p == "" || err != nil {
			return nil, fmt.Errorf("partition: New: partition %q does not make a valid lease key: %v", p, err)
		}
		if seen[p] {
			return nil, fmt.Errorf("partition: New: partition %q is listed twice", p)
		}
		seen[p] = true
	}
	po := o.Policy.Options()
	po.Wait, po.MaxAttempts = max(po.Wait, po.TTL), 0
	join, err := lease.NewPolicy(po)
	if err != nil {
		return nil, fmt.Errorf("partition: New: %w", err)
	}
	if o.RebalanceEvery == 0 {
		o.RebalanceEvery = po.RenewEvery
	}
	g := &Group{client: client, o: o, obs: o.Observer, clock: client.Clock(), join: join,
		wake: make(chan struct{}, 1), owned: make(map[string]*ownership)}
	if g.obs == nil {
		g.obs = observe.Nop[queueevent.Event]{}
	}
	g.order, g.rank = preference(o.Worker, o.Partitions)
	return g, nil
}

// memberKey and partitionKey return the lease keys of a worker's membership
// and of a partition of group: group + "/members/" or "/partitions/" and
// the escaped name (see package keyspace), so that no two share a lease.
func memberKey(group, worker string) string {
	return keyspace.LeaseKey(group+"/", keyspace.GroupMember, worker)
}

func partitionKey(group, p string) string {
	return keyspace.LeaseKey(group+"/", keyspace.GroupPartition, p)
}

// preference orders partitions by rendezvous hashing on worker: each
// worker prefers other partitions, so that workers starting together
// rarely race for the same ones, and keeps its most preferred ones when it
// must give some up.
func preference(worker string, partitions []string) ([]string, map[string]int) {
	score := func(p string) uint64 {
		h := fnv.New64a()
		h.Write([]byte(worker))
		h.Write([]byte{0})
		h.Write([]byte(p))
		// FNV-1a alone orders similar names alike for every worker; a
		// 64-bit finalizer (splitmix64's) spreads them.
		x := h.Sum64()
		x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
		x = (x ^ x>>27) * 0x94d049bb133111eb
		return x ^ x>>31
	}
	order := slices.Clone(partitions)
	slices.SortFunc(order, func(a, b string) int { return cmp.Compare(score(b), score(a)) })
	rank := make(map[string]int, len(order))
	for i, p := range order {
		rank[p] = i
	}
	return order, rank
}

// Owned returns the partitions the worker holds now, sorted, including
// those it is giving up whose handlers have not returned yet.
func (g *Group) Owned() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.owned))
	for p := range g.owned {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Members returns the live members the worker saw at its last rebalance,
// sorted, and its target share then.
func (g *Group) Members() (members []string, target int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.members), g.target
}

// Run makes the worker a member of the group and shares the partitions
// with the other live members until ctx ends, running fn for each
// partition it owns.
//
// Membership: the worker holds the lease Name + "/members/" + Worker
// (waiting up to a TTL for a previous incarnation's lease to expire) and
// records its name in the Roster; it takes no partition for one
// RebalanceEvery, so that workers starting together see each other first.
// Every RebalanceEvery it reads the
// roster, keeps the names whose membership lease is held (Inspect) and
// removes the others, and sorts them; the worker at index i of n live
// members aims to own len(Partitions)/n partitions, one more if
// i < len(Partitions)%n, so the shares add up to the partitions. Above its
// share it gives up its least preferred partitions (the handler's context
// is cancelled with ErrRevoked; once it returns, the lease is released).
// Below its share, and only while all its renewals are on schedule, it
// tries to acquire free partitions in its order of preference. There is no
// coordinator: workers converge as soon as they see the same members, and
// a worker that dies drops out when its membership lease expires, its
// partitions freeing up at the same time.
//
// When ctx ends, Run cancels every handler (with ctx's cause), releases
// each partition after its handler has returned, releases the membership
// and leaves the roster. It returns nil then, or what went wrong in those
// last two steps (a membership lease that was not released stays held
// until its TTL passes; other workers wait that long for its partitions'
// share). Errors releasing partitions are in the Revoked events. A Group
// runs at most one Run at a time.
func (g *Group) Run(ctx context.Context, fn Func) error {
	if fn == nil {
		return errors.New("partition: Run: nil Func")
	}
	if !g.running.CompareAndSwap(false, true) {
		return errors.New("partition: Run is already running")
	}
	defer g.running.Store(false)
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)

	var wg sync.WaitGroup
	wg.Go(func() { g.monitor(runCtx) })
	var (
		member *lease.Managed
		settle time.Time // no partition is taken before then
	)
	for runCtx.Err() == nil {
		if member != nil && member.Err() != nil {
			g.track.Lost(member.Handle(), member.Err(), g.clock.Now())
			g.emit(&queueevent.Lost{EventInfo: g.info(member.Handle(), "", member.Err())})
			g.track.Remove(member.Handle())
			_ = member.Stop(runCtx)
			member = nil
		}
		if member == nil {
			member = g.enter(runCtx)
			// Let workers that start together see each other before any
			// takes partitions, so that they do not all pass through a
			// one-worker share.
			settle = g.clock.Now().Add(g.o.RebalanceEvery)
		}
		if member != nil {
			g.rebalance(runCtx, fn, &wg, !g.clock.Now().Before(settle))
		}
		t := g.clock.NewTimer(g.o.RebalanceEvery)
		select {
		case <-runCtx.Done():
		case <-g.wake:
		case <-t.C():
		}
		t.Stop()
	}
	wg.Wait() // every partition's handler has returned, and its lease was released
	var err error
	if member != nil {
		g.track.Remove(member.Handle())
		dctx := context.WithoutCancel(ctx)
		// A membership already gone (lost, or refused as gone by the
		// backend) is no failure at shutdown; the release is still tried,
		// in case the backend was only unreachable.
		if rerr := member.Handle().Release(dctx); rerr != nil && !errors.Is(rerr, lease.ErrLost) && member.Err() == nil {
			err = rerr
		}
		rctx, cancel := context.WithTimeout(dctx, g.o.Policy.Options().OperationTimeout)
		if lerr := g.o.Roster.Leave(rctx, g.o.Name, g.o.Worker); lerr != nil {
			err = errors.Join(err, fmt.Errorf("partition: leave the roster of group %q: %w", g.o.Name, lerr))
		}
		cancel()
		_ = member.Stop(dctx)
	}
	return err
}

// enter acquires the membership lease and joins the roster. It returns
// nil if the lease was not acquired.
func (g *Group) enter(ctx context.Context) *lease.Managed {
	h, err := g.client.Acquire(ctx, memberKey(g.o.Name, g.o.Worker), g.join)
	if err != nil {
		if ctx.Err() == nil {
			g.emit(&queueevent.Rebalanced{EventInfo: g.info(nil, "", fmt.Errorf("partition: join group %q: %w", g.o.Name, err))})
		}
		return nil
	}
	m, err := h.StartManaged(context.WithoutCancel(ctx))
	if err != nil {
		// The local deadline passed since the acquire: not a member.
		_ = h.Release(context.WithoutCancel(ctx))
		if ctx.Err() == nil {
			g.emit(&queueevent.Rebalanced{EventInfo: g.info(nil, "", fmt.Errorf("partition: join group %q: %w", g.o.Name, err))})
		}
		return nil
	}
	g.track.Add(h, "", struct{}{})
	rctx, cancel := context.WithTimeout(ctx, g.o.Policy.Options().OperationTimeout)
	defer cancel()
	_ = g.o.Roster.Join(rctx, g.o.Name, g.o.Worker) // retried by each rebalance until it is there
	return m
}

// rebalance takes (if take is set) or gives up partitions towards the
// worker's share.
func (g *Group) rebalance(ctx context.Context, fn Func, wg *sync.WaitGroup, take bool) {
	members, err := g.live(ctx)
	if err != nil {
		if ctx.Err() == nil {
			g.emit(&queueevent.Rebalanced{EventInfo: g.info(nil, "", err)})
		}
		return
	}
	n, live := len(g.o.Partitions), len(members)
	target := n / live
	if slices.Index(members, g.o.Worker) < n%live {
		target++
	}

	g.mu.Lock()
	changed := !slices.Equal(members, g.members) || target != g.target
	g.members, g.target = members, target
	var active []*ownership
	for _, o := range g.owned {
		if !o.revoking {
			active = append(active, o)
		}
	}
	// Give up the least preferred partitions above the share.
	slices.SortFunc(active, func(a, b *ownership) int { return cmp.Compare(g.rank[b.name], g.rank[a.name]) })
	for i := 0; i < len(active)-target; i++ {
		active[i].revoking = true
		active[i].cancel(ErrRevoked)
	}
	need := target - len(active)
	owned := make(map[string]bool, len(g.owned))
	for p := range g.owned {
		owned[p] = true
	}
	g.mu.Unlock()

	if changed {
		g.emit(&queueevent.Rebalanced{EventInfo: g.info(nil, "", nil), Members: members, Target: target, Owned: g.Owned()})
	}
	for _, p := range g.order {
		if !take || need <= 0 || ctx.Err() != nil || !g.track.Healthy(g.clock.Now()) {
			return
		}
		if owned[p] {
			continue
		}
		h, err := g.client.TryAcquire(ctx, partitionKey(g.o.Name, p), g.o.Policy)
		switch {
		case errors.Is(err, lease.ErrNotAcquired):
			continue
		case err != nil:
			return // the backend is failing: try again at the next rebalance
		}
		g.start(ctx, p, h, fn, wg)
		need--
	}
}

// live returns the live members of the group, sorted: the names in the
// roster whose membership lease is held, and this worker. It removes the
// others from the roster, and adds this worker if it is missing.
func (g *Group) live(ctx context.Context) ([]string, error) {
	timeout := g.o.Policy.Options().OperationTimeout
	rctx, cancel := context.WithTimeout(ctx, timeout)
	names, err := g.o.Roster.Members(rctx, g.o.Name)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("partition: group %q: read the roster: %w", g.o.Name, err)
	}
	members := []string{g.o.Worker}
	self := false
	for _, w := range names {
		if w == g.o.Worker {
			self = true
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		r, err := g.client.Inspect(rctx, memberKey(g.o.Name, w))
		cancel()
		switch {
		case errors.Is(err, lease.ErrInvalidKey):
		case err != nil:
			return nil, fmt.Errorf("partition: group %q: inspect member %q: %w", g.o.Name, w, err)
		case r.Held:
			members = append(members, w)
			continue
		}
		rctx, cancel = context.WithTimeout(ctx, timeout)
		_ = g.o.Roster.Leave(rctx, g.o.Name, w) // dead: forget it
		cancel()
	}
	if !self {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		_ = g.o.Roster.Join(rctx, g.o.Name, g.o.Worker)
		cancel()
	}
	slices.Sort(members)
	return members, nil
}

// start runs fn for partition p, whose lease h was just acquired.
func (g *Group) start(runCtx context.Context, p string, h *lease.Handle, fn Func, wg *sync.WaitGroup) {
	m, err := h.StartManaged(context.WithoutCancel(runCtx))
	if err != nil {
		// The local deadline passed since the acquire: leave the
		// partition to the next rebalance.
		_ = h.Release(context.WithoutCancel(runCtx))
		g.emit(&queueevent.Rebalanced{EventInfo: g.info(h, p, err)})
		return
	}
	pctx, cancel := context.WithCancelCause(m.Context())
	o := &ownership{name: p, h: h, m: m, cancel: cancel}
	g.mu.Lock()
	g.owned[p] = o
	g.mu.Unlock()
	g.track.Add(h, p, struct{}{})
	g.emit(&queueevent.Assigned{EventInfo: g.info(h, p, nil)})
	wg.Go(func() { g.own(runCtx, o, pctx, fn) })
}

// own runs fn for the owned partition o until it returns, then gives the
// partition up.
func (g *Group) own(runCtx context.Context, o *ownership, pctx context.Context, fn Func) {
	stop := context.AfterFunc(runCtx, func() { o.cancel(context.Cause(runCtx)) })
	defer stop()
	done := make(chan error, 1)
	go func() { done <- callPartition(fn, pctx, Owned{Name: o.name, Snapshot: o.h.Snapshot()}) }()
	var err error
	lost := false
	select {
	case err = <-done:
	case <-o.m.Lost():
		lost = true
		g.track.Lost(o.h, o.m.Err(), g.clock.Now())
		g.emit(&queueevent.Lost{EventInfo: g.info(o.h, o.name, o.m.Err())})
		err = <-done
	}
	g.track.Remove(o.h)
	reason := err
	if pctx.Err() != nil {
		reason = context.Cause(pctx)
	}
	dctx := context.WithoutCancel(runCtx)
	// Also after a loss: if the backend was only unreachable, it may still
	// show this acquisition, and releasing frees the partition sooner.
	rerr := o.h.Release(dctx)
	sctx, cancel := context.WithTimeout(dctx, g.o.Policy.Options().OperationTimeout)
	_ = o.m.Stop(sctx)
	cancel()
	if !lost && o.m.Err() != nil { // lost after fn returned, before the release
		lost = true
		g.emit(&queueevent.Lost{EventInfo: g.info(o.h, o.name, o.m.Err())})
	}
	g.mu.Lock()
	delete(g.owned, o.name)
	g.mu.Unlock()
	if !lost {
		g.emit(&queueevent.Revoked{EventInfo: g.info(o.h, o.name, rerr), Reason: reason})
	}
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// callPartition runs fn, turning a panic into an error.
func callPartition(fn Func, ctx context.Context, p Owned) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("partition: handler of partition %q panicked: %v\n%s", p.Name, r, debug.Stack())
		}
	}()
	return fn(ctx, p)
}

// monitor emits heartbeats for the group's leases until ctx ends.
func (g *Group) monitor(ctx context.Context) {
	every := g.o.Policy.Options().RenewEvery / 2
	info := g.info(nil, "", nil)
	for health.Sleep(ctx, g.clock, every) == nil {
		for _, e := range g.track.Beat(g.clock.Now(), info, errUnhealthy) {
			g.emit(e)
		}
	}
}

// info returns the fields of an event about the lease h (nil for the
// group) of partition p ("" for the group or the membership).
func (g *Group) info(h *lease.Handle, p string, err error) queueevent.EventInfo {
	e := queueevent.EventInfo{Name: g.o.Name, Worker: g.o.Worker, ID: p, Err: err}
	if h != nil {
		e.Key, e.Token = h.Key(), h.Token()
	}
	return e
}

func (g *Group) emit(e queueevent.Event) { g.obs.Observe(e) }
