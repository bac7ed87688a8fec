package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/chaos"
	"github.com/golib/lease/internal/testserver"
	"github.com/golib/lease/lease"
)

// A waiting Acquire on Valkey hears of a release through a subscription to
// the key's release shard channel, which a fault can end (a cluster node
// that gives up the key's slot ends it with SUNSUBSCRIBE) or lose (a
// restart). The harness's clients also poll every Retry, so they cannot
// show that a waiter was woken; the rows of this file add a probe whose
// waiter polls only every 10 minutes: it is granted within wakeBound only
// if its watch survived the fault and woke it.

// wakeBound is how long after a release, or after a restart that freed
// the key, a probe waiter may take to be granted: a round trip and a new
// subscription (valkeystore backs off up to 1s between attempts) take far
// less, and without a wake the waiter would sleep for its Retry of 10
// minutes.
const wakeBound = 10 * time.Second

// probeKey is the lease key of the probe. The harness's clients never use
// it.
const probeKey = "probe"

// waiterPolicy is the probe's policy: it asks again only every 10 minutes,
// so that only a wake from its watch gets it the lease within wakeBound.
var waiterPolicy = lease.PolicyOptions{TTL: time.Hour, Retry: 10 * time.Minute, Wait: 20 * time.Minute,
	OperationTimeout: 5 * time.Second}

// probe is a waiter probe: two lease clients on connections of their own
// take turns, one holding probeKey while the other waits for it. Their
// backend calls are recorded into the run's history, so the model checks
// them with the rest.
type probe struct {
	t       *testing.T
	clients [2]*lease.Client
	stores  [2]*leasevalkey.Store
	ctl     valkey.Client // for PUBSUB SHARDNUMSUB
	policy  lease.Policy
	holder  *lease.Handle // of clients[1-next]
	next    int           // the client that waits in the next round
	waits   []time.Duration
	ctx     context.Context // bounds every waiter, ends with the test
}

// newProbe starts a probe on r's target and lets its first client take
// probeKey.
func newProbe(t *testing.T, r *run) *probe {
	t.Helper()
	policy, err := lease.NewPolicy(waiterPolicy)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &probe{t: t, policy: policy, ctx: ctx}
	lanes := chaos.NewLanes("w")
	for i := range p.clients {
		c, err := r.target.ValkeyClient(r.target.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		s, err := leasevalkey.New(c, leasevalkey.Options{Prefix: r.target.Prefix + "lease:"})
		if err != nil {
			t.Fatal(err)
		}
		p.stores[i] = s
		b := chaos.NewRecordingBackend(s, r.rec, lanes.New())
		if p.clients[i], err = lease.NewClient(b, lease.ClientOptions{Owner: fmt.Sprintf("probe-%d", i)}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			p.ctl = c
		}
	}
	if p.holder, err = p.clients[0].TryAcquire(ctxT(t), probeKey, policy); err != nil {
		t.Fatalf("the probe's first holder: %v", err)
	}
	p.next = 1
	return p
}

// granted is the result of a probe waiter's Acquire.
type granted struct {
	h   *lease.Handle
	err error
	at  time.Time
}

// wait starts the next client's Acquire of probeKey and returns once the
// waiter watches the key's release channel, which it does only after an
// attempt found the key held.
func (p *probe) wait() <-chan granted {
	p.t.Helper()
	got := make(chan granted, 1)
	c := p.clients[p.next]
	go func() {
		h, err := c.Acquire(p.ctx, probeKey, p.policy)
		got <- granted{h: h, err: err, at: time.Now()}
	}()
	p.awaitWatching()
	return got
}

// awaitWatching waits until the release channel of probeKey has a
// subscriber on the node that serves it.
func (p *probe) awaitWatching() {
	p.t.Helper()
	ch := p.stores[0].RecordKey(probeKey) + ":released"
	deadline := time.Now().Add(wakeBound)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		vals, err := p.ctl.Do(ctx, p.ctl.B().PubsubShardnumsub().Channel(ch).Build()).ToArray()
		cancel()
		if err == nil && len(vals) == 2 {
			if n, _ := vals[1].AsInt64(); n > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the probe's waiter did not subscribe to %s within %v (last: %v)", ch, wakeBound, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// release releases the holder's lease and returns when it did.
func (p *probe) release() time.Time {
	p.t.Helper()
	if err := p.holder.Release(ctxT(p.t)); err != nil {
		p.t.Fatalf("the probe holder's release: %v", err)
	}
	return time.Now()
}

// granted waits up to wakeBound for the waiter's grant, counting from
// since (the release, or the restart that freed the key), records the
// time taken, and makes the waiter the holder of the next round.
func (p *probe) granted(got <-chan granted, since time.Time, after string) {
	p.t.Helper()
	select {
	case g := <-got:
		if g.err != nil {
			p.t.Fatalf("the probe's waiter, %s: %v", after, g.err)
		}
		d := g.at.Sub(since)
		p.waits = append(p.waits, d)
		p.t.Logf("probe round %d: waiter granted %v after %s", len(p.waits), d.Round(time.Millisecond), after)
		p.holder, p.next = g.h, 1-p.next
	case <-time.After(wakeBound):
		p.t.Fatalf("the probe's waiter was not granted within %v %s: its watch did not wake it", wakeBound, after)
	}
}

// stop releases the last holder's lease, and logs the rounds: how many,
// and the time from release (or restart) to grant.
func (p *probe) stop() {
	p.t.Helper()
	if err := p.holder.Release(ctxT(p.t)); err != nil && !errors.Is(err, lease.ErrLost) {
		p.t.Errorf("the probe holder's last release: %v", err)
	}
	if len(p.waits) == 0 {
		p.t.Error("the probe made no round")
		return
	}
	w := slices.Clone(p.waits)
	slices.Sort(w)
	p.t.Logf("probe-summary %s: %d rounds, release to grant min %v, median %v, max %v", p.t.Name(), len(w),
		w[0].Round(time.Millisecond), w[len(w)/2].Round(time.Millisecond), w[len(w)-1].Round(time.Millisecond))
}

// voteGap is how long the row waits between two failovers of one shard.
// The primaries of a Valkey cluster vote for a failover of a shard at
// most once in twice the cluster node timeout (5s in testserver's
// clusters); a manual failover asked for sooner gets too few votes and
// times out, changing nothing.
const voteGap = 11 * time.Second

// minProbeRounds is the fewest probe rounds a row makes, however short it
// runs: enough for every kind of fault of the row at least once.
const minProbeRounds = 4

// TestValkeyClusterFailoverUnderWaiters runs the clients on a dedicated
// Valkey cluster of two primaries, each with a replica, while the nemesis
// alternately fails the probe key's primary over to its replica with
// CLUSTER FAILOVER (the next failover of that shard fails back) and
// migrates hash slots to the other primary: the probe key's slot, and one
// of the run's keys'. Since the probe's slot moves, the failovers take
// turns between the shards, each failing over the run's keys it serves. A manual failover waits until
// the replica has caught up before it takes over, and a migration moves
// every key with its TTL, so neither fault is marked as losing data: the
// model holds the cluster to every lease it acknowledged. The probe's
// waiter waits through each fault and must be woken by the release that
// follows.
func TestValkeyClusterFailoverUnderWaiters(t *testing.T) {
	cl := testserver.StartValkeyCluster(t, 2)
	replicas := make([]*testserver.ValkeyServer, len(cl.Nodes()))
	for i := range replicas {
		replicas[i] = cl.AddReplica(t, i)
	}
	ctl, err := valkey.NewClient(valkey.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	target := valkeyTarget(cl.Addrs()[0])
	r := startRun(t, target, rowOptions{})
	p := newProbe(t, r)
	probeSlot := keySlot(t, ctl, p.stores[0].RecordKey(probeKey))
	var runSlots []int
	for _, k := range keys {
		runSlots = append(runSlots, keySlot(t, ctl, p.stores[0].RecordKey(k)))
	}
	failovers, moves := 0, 0
	lastFailover := make([]time.Time, len(replicas)) // by shard, the index in cl.Nodes()
	for round := 0; r.running() || round < minProbeRounds; round++ {
		r.pause(ttl/2, ttl)
		got := p.wait()
		var after string
		if i := slotOwner(t, ctl, cl, probeSlot); round%2 == 0 && time.Since(lastFailover[i]) > voteGap {
			// Fail over the primary of the probe's slot, which serves
			// the run's keys of that slot too.
			after = "a failover of the probe key's primary"
			r.h.Fault(fmt.Sprintf("CLUSTER FAILOVER of the primary of slot %d (the probe's)", probeSlot), false, func() {
				old := cl.Nodes()[i]
				awaitReplicaSynced(t, replicas[i].Addr())
				cl.Failover(t, replicas[i])
				replicas[i] = old
			})
			lastFailover[i] = time.Now()
			failovers++
		} else {
			// Move the probe's slot, and the slot of one of the run's
			// keys, to the other primary.
			run := runSlots[moves%len(runSlots)]
			after = "the probe key's slot moved to another primary"
			r.h.Fault(fmt.Sprintf("migrate slots %d (the probe's) and %d (a run key's) to the other primary", probeSlot, run), false, func() {
				for _, s := range slices.Compact([]int{probeSlot, run}) {
					cl.MoveSlot(t, s, 1-slotOwner(t, ctl, cl, s))
				}
			})
			moves++
		}
		p.granted(got, p.release(), "a release after "+after)
	}
	p.stop()
	res := r.finish(rowOptions{})
	t.Logf("%d failovers, %d slot migrations; %d operations checked by the model", failovers, moves, res.Checked)
}

// keySlot returns the hash slot of key.
func keySlot(t *testing.T, c valkey.Client, key string) int {
	t.Helper()
	n, err := c.Do(ctxT(t), c.B().ClusterKeyslot().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
	}
	return int(n)
}

// slotOwner returns the index in cl.Nodes() of the primary that serves
// slot, as CLUSTER SLOTS says.
func slotOwner(t *testing.T, c valkey.Client, cl *testserver.ValkeyClusterServers, slot int) int {
	t.Helper()
	ranges, err := c.Do(ctxT(t), c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	for _, rg := range ranges {
		f, err := rg.ToArray()
		if err != nil || len(f) < 3 {
			continue
		}
		lo, _ := f[0].AsInt64()
		hi, _ := f[1].AsInt64()
		node, _ := f[2].ToArray()
		if int64(slot) < lo || int64(slot) > hi || len(node) < 2 {
			continue
		}
		host, _ := node[0].ToString()
		port, _ := node[1].AsInt64()
		if i := slices.Index(cl.Addrs(), net.JoinHostPort(host, strconv.FormatInt(port, 10))); i >= 0 {
			return i
		}
	}
	t.Fatalf("no primary of the cluster serves slot %d", slot)
	return -1
}

// awaitReplicaSynced waits until the replica at addr has its link to its
// primary up: a manual failover of a replica that has not caught up times
// out and changes nothing.
func awaitReplicaSynced(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(do(t, addr, "INFO", "replication"), "master_link_status:up") {
		if time.Now().After(deadline) {
			t.Fatalf("the replica %s did not sync with its primary within 30s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
