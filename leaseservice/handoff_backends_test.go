package leaseservice_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/golib/lease/internal/testkit/backendenv"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseservice"
)

// TestRollingRestartHandsOffOnRealBackends runs three replicas of a
// service on real Valkey and PostgreSQL, each listing the others as
// successors, and restarts the leader three times (stop it, start a new
// replica). Every stop must hand the lease off: the old leader reports
// HandedOff, a waiting replica is elected with a higher token, and the
// fenced writes of the terms never overlap. The waiters' Retry and the
// TTL are far longer than the test, so only the hand-off's notification
// can elect the successor in time; the gaps are logged, not asserted.
func TestRollingRestartHandsOffOnRealBackends(t *testing.T) {
	t.Parallel()
	for _, kind := range backendenv.Kinds {
		t.Run(kind.Name, func(t *testing.T) {
			t.Parallel()
			env := kind.Env(t)
			a := newArena(t, env.Fence)
			p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Retry: 10 * time.Second, OperationTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			type replica struct {
				owner string
				svc   *leaseservice.Service
				stop  func() error
			}
			owners := []string{"replica-0", "replica-1", "replica-2", "replica-3", "replica-4", "replica-5"}
			type seen struct {
				owner string
				tr    leaseservice.Transition
			}
			elected := make(chan seen, 16)
			handed := make(chan seen, 16)
			startReplica := func(owner string) *replica {
				c := client(t, env.NewBackend(t, env.Addr), owner)
				log := a.observe(owner)
				s, err := leaseservice.New(c, "rolling", p, a.work(0, nil), leaseservice.Options{
					Successors: owners,
					OnTransition: func(tr leaseservice.Transition) {
						log(tr)
						switch tr.Kind {
						case leaseservice.Elected:
							elected <- seen{owner, tr}
						case leaseservice.HandedOff:
							handed <- seen{owner, tr}
						}
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				return &replica{owner: owner, svc: s, stop: start(t, s)}
			}
			var live []*replica
			for _, o := range owners[:3] {
				live = append(live, startReplica(o))
			}
			leader := recv(t, elected, "the first election").tr
			var gaps []time.Duration
			for round := range 3 {
				i := slices.IndexFunc(live, func(r *replica) bool { return r.svc.IsLeader() })
				if i < 0 {
					t.Fatalf("round %d: no replica reports IsLeader after %v was elected", round, leader.Token)
				}
				old := live[i]
				stopped := time.Now()
				if err := old.stop(); err != nil {
					t.Fatalf("round %d: %s's Run: %v", round, old.owner, err)
				}
				h := recv(t, handed, fmt.Sprintf("round %d: %s's hand-off", round, old.owner))
				tr := h.tr
				if h.owner != old.owner || tr.Token != leader.Token {
					t.Fatalf("round %d: hand-off of token %d, want the leader's %d", round, tr.Token, leader.Token)
				}
				n := recv(t, elected, fmt.Sprintf("round %d: the successor's election", round))
				gaps = append(gaps, time.Since(stopped))
				if n.tr.Token <= leader.Token || !slices.Contains(tr.Candidates, n.owner) || n.owner == old.owner {
					t.Fatalf("round %d: %s elected with token %d (hand-off offered to %q), want a candidate with a token above %d", round, n.owner, n.tr.Token, tr.Candidates, leader.Token)
				}
				leader = n.tr
				live = append(slices.Delete(live, i, i+1), startReplica(owners[3+round]))
			}
			for _, r := range live {
				if err := r.stop(); err != nil {
					t.Fatal(err)
				}
			}
			a.check()
			t.Logf("%s: stop-to-successor-elected per restart %v (TTL 30s, Retry 10s)", kind.Name, gaps)
		})
	}
}
