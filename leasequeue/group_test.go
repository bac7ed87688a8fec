package leasequeue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/internal/testkit/stall"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasequeue/partition"
	"github.com/golib/lease/leasequeue/queueevent"
)

// timed collects events with the time they arrived.
type timed struct {
	mu   sync.Mutex
	list []timedEvent
}

type timedEvent struct {
	at time.Time
	e  leasequeue.Event
}

func (r *timed) Observe(e leasequeue.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, timedEvent{time.Now(), e})
}

func (r *timed) events() []timedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.list)
}

// groupMember is one running worker of a group.
type groupMember struct {
	name   string
	g      *partition.Group
	done   chan struct{}
	cancel context.CancelFunc
}

func startMember(ctx context.Context, t *testing.T, b lease.Backend, name string, o partition.Options, fn partition.Func) *groupMember {
	t.Helper()
	g, err := partition.New(newClient(t, b, name, nil), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	m := &groupMember{name: name, g: g, done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(m.done)
		if err := g.Run(ctx, fn); err != nil && !errors.Is(err, errCut) { // a cut-off worker cannot leave
			t.Errorf("%s: Run = %v", name, err)
		}
	}()
	return m
}

// balanced reports whether every partition is owned by exactly one of
// members, each owning want of them.
func balanced(members []*groupMember, partitions, want int) bool {
	seen := map[string]bool{}
	for _, m := range members {
		owned := m.g.Owned()
		if len(owned) != want {
			return false
		}
		for _, p := range owned {
			if seen[p] {
				return false
			}
			seen[p] = true
		}
	}
	return len(seen) == partitions
}

// TestPartitionsSpreadEvenlyAndMove: three workers share twelve
// partitions four each; a fourth joins and each ends up with three; one is
// killed and its partitions move to the others within a TTL of its leases'
// expiry. Every handler writes to its partition, fenced by the partition's
// token, all along: no partition ever accepts a write from an older owner
// after a newer one wrote.
func TestPartitionsSpreadEvenlyAndMove(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store) {
		const ttl = 2 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var parts []string
		for i := range 12 {
			parts = append(parts, fmt.Sprintf("p%02d", i))
		}
		var (
			rec         timed
			mu          sync.Mutex
			refused     int
			refusedLive int // refused while the writer still owned the partition
		)
		stalls := stall.Start(t)
		o := partition.Options{Name: "grp", Partitions: parts, Policy: loadedPolicy(t, ttl), Roster: s.roster(t), Observer: &rec}
		work := func(ctx context.Context, p partition.Owned) error {
			for {
				ok, err := s.write(ctx, p.Snapshot, p.Name)
				if err == nil && !ok {
					mu.Lock()
					refused++
					if ctx.Err() == nil {
						refusedLive++
					}
					mu.Unlock()
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(25 * time.Millisecond):
				}
			}
		}
		// worker-1 will be killed: cut off from the backend and the roster,
		// so that nothing it does reaches them, as if it had crashed.
		doomed := &cutOff{Backend: s.backend(t)}
		od := o
		od.Roster = cutRoster{o.Roster, &doomed.cut}
		var members []*groupMember
		for i := range 3 {
			b, oi := s.backend(t), o
			if i == 1 {
				b, oi = doomed, od
			}
			members = append(members, startMember(ctx, t, b, fmt.Sprint("worker-", i), oi, work))
		}
		eventually(t, time.Minute, "3 workers own 4 partitions each", func() bool { return balanced(members, 12, 4) })

		joined := time.Now()
		members = append(members, startMember(ctx, t, s.backend(t), "worker-3", o, work))
		eventually(t, time.Minute, "4 workers own 3 partitions each", func() bool { return balanced(members, 12, 3) })
		t.Logf("a fourth worker joined: even again after %v", time.Since(joined).Round(time.Millisecond))

		// Kill worker-1: it stops renewing and writing at once.
		dead := members[1]
		owned := dead.g.Owned()
		killed := time.Now()
		doomed.cut.Store(true)
		dead.cancel()
		<-dead.done
		inspector := newClient(t, s.backend(t), "inspector", nil)
		expires := map[string]time.Time{}
		for _, p := range owned {
			r, err := inspector.Inspect(ctx, "grp/partitions/"+p)
			if err != nil {
				t.Fatal(err)
			}
			if r.Held && r.Owner == dead.name {
				expires[p] = time.Now().Add(r.Remaining)
			}
		}
		members = slices.Delete(members, 1, 2)
		eventually(t, time.Minute, "3 workers own 4 partitions each after a kill", func() bool { return balanced(members, 12, 4) })

		var worst, stalled time.Duration
		for _, te := range rec.events() {
			a, ok := te.e.(*queueevent.Assigned)
			if !ok || te.at.Before(killed) {
				continue
			}
			exp, moved := expires[a.ID]
			if !moved || a.Worker == dead.name {
				continue
			}
			stall := stalls.Within(exp, te.at)
			if wait := te.at.Sub(exp) - stall; wait > worst {
				worst, stalled = wait, stall
			}
			delete(expires, a.ID)
		}
		if len(expires) > 0 {
			t.Errorf("partitions of the killed worker never assigned again: %v", expires)
		}
		t.Logf("the killed worker's %d partitions moved at worst %v after their leases expired (TTL %v; not counting %v the process was stalled)",
			len(owned), worst.Round(time.Millisecond), ttl, stalled.Round(time.Millisecond))
		if worst > ttl {
			t.Errorf("a partition of the killed worker moved %v after its lease expired, more than a TTL (%v)", worst, ttl)
		}

		for _, m := range members {
			m.cancel()
			<-m.done
		}

		// The judge: each partition's accepted writes, in the order the
		// server applied them, never go back to an older token.
		for _, p := range parts {
			toks, err := s.accepted(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if len(toks) == 0 {
				t.Errorf("%s: no write accepted", p)
			}
			owners := 1
			for i := 1; i < len(toks); i++ {
				if toks[i] < toks[i-1] {
					t.Errorf("%s: token %d accepted after token %d: two owners at once", p, toks[i], toks[i-1])
				}
				if toks[i] != toks[i-1] {
					owners++
				}
			}
			t.Logf("%s: %d writes by %d owners in turn", p, len(toks), owners)
		}
		mu.Lock()
		t.Logf("%d writes refused as stale", refused)
		if refusedLive > 0 {
			// A newer owner wrote while this one's context was live: two
			// owners at once, which only the fence kept apart.
			t.Errorf("%d writes refused as stale while their writer still owned the partition", refusedLive)
		}
		mu.Unlock()
		var revoked, lost int
		for _, te := range rec.events() {
			switch te.e.(type) {
			case *queueevent.Revoked:
				revoked++
			case *leasequeue.Lost:
				lost++
			}
		}
		if revoked == 0 {
			t.Error("no partition was revoked when the fourth worker joined")
		}
		t.Logf("%d partitions revoked gracefully, %d lost", revoked, lost)
		if names, err := o.Roster.Members(ctx, "grp"); err != nil || len(names) != 0 {
			t.Errorf("roster after every worker left: %q, %v; want it empty", names, err)
		}
	})
}

func TestNewGroupValidatesOptions(t *testing.T) {
	c := newClient(t, leasememory.New(leasememory.Options{}), "w", nil)
	p := newPolicy(t, lease.PolicyOptions{TTL: time.Second})
	r := &partition.MemoryRoster{}
	ok := partition.Options{Name: "g", Partitions: []string{"a", "b"}, Policy: p, Roster: r}
	if _, err := partition.New(c, ok); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*partition.Options)
	}{
		{"no name", func(o *partition.Options) { o.Name = "" }},
		{"no partitions", func(o *partition.Options) { o.Partitions = nil }},
		{"duplicate partition", func(o *partition.Options) { o.Partitions = []string{"a", "a"} }},
		{"empty partition", func(o *partition.Options) { o.Partitions = []string{""} }},
		{"bad worker", func(o *partition.Options) { o.Worker = "tab\there" }},
		{"zero policy", func(o *partition.Options) { o.Policy = lease.Policy{} }},
		{"no roster", func(o *partition.Options) { o.Roster = nil }},
		{"negative rebalance", func(o *partition.Options) { o.RebalanceEvery = -1 }},
	} {
		o := ok
		tc.edit(&o)
		if _, err := partition.New(c, o); err == nil {
			t.Errorf("%s: NewGroup succeeded", tc.name)
		}
	}
}

// TestRevokedAndLostAreDifferent: a partition given up to a new worker is
// revoked (cause ErrRevoked, a Revoked event), while one whose lease runs
// out is lost (cause wrapping lease.ErrLost, a Lost event).
func TestRevokedAndLostAreDifferent(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	cut := &cutOff{Backend: mem}
	var rec timed
	o := partition.Options{Name: "g", Partitions: []string{"a", "b"}, Policy: loadedPolicy(t, time.Second),
		Roster: &partition.MemoryRoster{}, Observer: &rec}
	var (
		mu     sync.Mutex
		causes = map[string][]error{} // by worker
	)
	work := func(worker string) partition.Func {
		return func(ctx context.Context, p partition.Owned) error {
			<-ctx.Done()
			mu.Lock()
			causes[worker] = append(causes[worker], context.Cause(ctx))
			mu.Unlock()
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := startMember(ctx, t, cut, "a", o, work("a"))
	eventually(t, 30*time.Second, "a owns both partitions", func() bool { return len(a.g.Owned()) == 2 })
	b := startMember(ctx, t, mem, "b", o, work("b"))
	eventually(t, 30*time.Second, "a and b own one each", func() bool { return balanced([]*groupMember{a, b}, 2, 1) })
	cut.cut.Store(true) // a is cut off: it loses its partition and its membership
	eventually(t, 30*time.Second, "b owns both partitions", func() bool { return len(b.g.Owned()) == 2 && len(a.g.Owned()) == 0 })
	cancel()
	<-a.done
	<-b.done

	mu.Lock()
	defer mu.Unlock()
	if len(causes["a"]) != 2 || !errors.Is(causes["a"][0], partition.ErrRevoked) || !errors.Is(causes["a"][1], lease.ErrLost) {
		t.Fatalf("a's handlers ended with %v; want ErrRevoked, then lease.ErrLost", causes["a"])
	}
	var revoked, lost []string
	for _, te := range rec.events() {
		switch e := te.e.(type) {
		case *queueevent.Revoked:
			revoked = append(revoked, e.Worker+"/"+e.ID)
			if e.Worker == "a" && !errors.Is(e.Reason, partition.ErrRevoked) {
				t.Errorf("Revoked reason %v; want ErrRevoked", e.Reason)
			}
		case *leasequeue.Lost:
			if e.ID != "" { // not the membership
				lost = append(lost, e.Worker+"/"+e.ID)
			}
		}
	}
	if len(revoked) < 1 || revoked[0][:2] != "a/" || len(lost) != 1 || lost[0][:2] != "a/" {
		t.Fatalf("Revoked %q, Lost %q; want one of a's partitions revoked, then a's other one lost", revoked, lost)
	}
}

// failingLeave is a roster whose Leave fails.
type failingLeave struct{ partition.MemoryRoster }

var errLeave = errors.New("roster unavailable")

func (*failingLeave) Leave(context.Context, string, string) error { return errLeave }

func TestRunReportsWhatFailedOnTheWayOut(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	o := partition.Options{Name: "g", Partitions: []string{"a"}, Policy: loadedPolicy(t, time.Second), Roster: &failingLeave{}}
	g, err := partition.New(newClient(t, mem, "w", nil), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- g.Run(runCtx, func(ctx context.Context, p partition.Owned) error { <-ctx.Done(); return nil })
	}()
	eventually(t, 30*time.Second, "w owns the partition", func() bool { return len(g.Owned()) == 1 })
	if r, err := mem.Inspect(ctx, "g/members/w"); err != nil || !r.Held {
		t.Fatalf("membership while running: %+v, %v; want held (is the key right?)", r, err)
	}
	stop()
	if err := <-done; !errors.Is(err, errLeave) || !strings.Contains(err.Error(), `"g"`) {
		t.Fatalf("Run = %v, want the roster's Leave error naming the group", err)
	}
	// The membership was released all the same.
	r, err := mem.Inspect(ctx, "g/members/w")
	if err != nil || r.Held {
		t.Fatalf("membership after Run: %+v, %v; want released", r, err)
	}
}

// memberKey is the lease key of a group's member, as package partition
// names it.
func memberKey(group, worker string) string {
	return keyspace.LeaseKey(group+"/", keyspace.GroupMember, worker)
}

// cutRoster is a roster that fails every call, without sending it, while
// cut is set.
type cutRoster struct {
	partition.Roster
	cut *atomic.Bool
}

func (r cutRoster) Join(ctx context.Context, group, worker string) error {
	if r.cut.Load() {
		return errCut
	}
	return r.Roster.Join(ctx, group, worker)
}

func (r cutRoster) Members(ctx context.Context, group string) ([]string, error) {
	if r.cut.Load() {
		return nil, errCut
	}
	return r.Roster.Members(ctx, group)
}

func (r cutRoster) Leave(ctx context.Context, group, worker string) error {
	if r.cut.Load() {
		return errCut
	}
	return r.Roster.Leave(ctx, group, worker)
}
