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
	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
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
// subscription (valkeyplumbing backs off up to 1s between attempts) take far
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

// restartWaiterPolicy is waiterPolicy with a Retry of 2s, for the restart
// rows. After a restart the waiter's watch subscribes again and wakes it,
// but its attempt may go out on a connection of the client that died with
// the server and has not been found dead yet: it fails (EOF, outcome
// unknown), and Client.Acquire then waits its Retry before it asks again
// (10 minutes with waiterPolicy), although the restart freed the key.
// With a Retry of 2s the waiter is still granted only if woken: while it
// watches a held key, Acquire asks again only when woken (a release or a
// new subscription) or after a failed attempt, never on a timer, so a
// waiter whose watch did not wake it after the restart would wait out its
// Wait of 20 minutes.
var restartWaiterPolicy = lease.PolicyOptions{TTL: time.Hour, Retry: 2 * time.Second, Wait: 20 * time.Minute,
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
	rec     *chaos.Recorder
}

// newProbe starts a probe on r's target, whose waiters use the policy
// of o, and lets its first client take probeKey. Its clients are made as
// the run's are (Target.ValkeyClient), but with pipelined they always
// pipeline: valkey-go then reads every connection in a goroutine of its
// own, which finds at once a connection that a killed server closed,
// where a connection used one request at a time is found dead only by
// the next request on it, which fails.
func newProbe(t *testing.T, r *run, o lease.PolicyOptions, pipelined bool) *probe {
	t.Helper()
	policy, err := lease.NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &probe{t: t, policy: policy, ctx: ctx, rec: r.rec}
	lanes := chaos.NewLanes("w")
	for i := range p.clients {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{r.target.Addr}, DisableCache: true,
			ConnWriteTimeout: 2 * time.Second, Dialer: net.Dialer{Timeout: 2 * time.Second}, AlwaysPipelining: pipelined})
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
			p.logOps()
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
		p.logOps()
		p.t.Fatalf("the probe's waiter was not granted within %v %s: its watch did not wake it", wakeBound, after)
	}
}

// logOps logs the probe's operations and the faults, to show why a
// waiter was not granted in time.
func (p *probe) logOps() {
	p.t.Helper()
	for _, op := range p.rec.Ops() {
		if lanePrefix(op, "w") || op.Kind == chaos.KindFault {
			p.t.Logf("%s", op)
		}
	}
}

// deadConnAttempts counts the probe's acquire and renew calls made at or
// after the recorder's time since that failed or whose outcome is unknown.
func (p *probe) deadConnAttempts(since int64) int {
	return count(p.rec.Ops(), func(op chaos.Op) bool {
		return lanePrefix(op, "w") && (op.Kind == chaos.KindAcquire || op.Kind == chaos.KindRenew) && op.Call >= since &&
			(op.Outcome == chaos.Unknown || op.Outcome == chaos.Failed)
	})
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
	p := newProbe(t, r, waiterPolicy, false)
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

// TestValkeyRestartUnderWaiters kills the lease server with SIGKILL and
// restarts it while the probe's waiter waits, as TestValkeyKillNoPersistence
// and TestValkeyKillAOF do under the harness's clients (and with the same
// marks: data lost without persistence, none with the append-only file).
// Without persistence the restart forgets the probe holder's lease, so
// the key is free and the waiter must be granted once its subscription
// is back, since no release will ever be announced. With the append-only
// file the holder still holds the lease after the restart, with the same
// token; it then releases, and that release must wake the waiter.
//
// The probe's clients always pipeline (see newProbe): with valkey-go's
// default, a call right after the restart often goes out on a connection
// that died with the server and fails with EOF, outcome unknown; for the
// holder's release that leaves the lease held for its hour and nothing
// to wake the waiter. The harness's clients keep the default, and the
// waiters' Retry is 2s (see restartWaiterPolicy).
func TestValkeyRestartUnderWaiters(t *testing.T) {
	for _, aof := range []bool{false, true} {
		name := "no-persistence"
		if aof {
			name = "aof"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			restartUnderWaiters(t, aof)
		})
	}
}

func restartUnderWaiters(t *testing.T, aof bool) {
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{AppendOnly: aof})
	target := valkeyTarget(srv.Addr())
	if !aof {
		target.FenceAddr = testserver.Valkey(t).Addr() // the fences must outlive the lease server's data
	}
	r := startRun(t, target, rowOptions{})
	p := newProbe(t, r, restartWaiterPolicy, true)
	restarts, deadConn := 0, 0
	for round := 0; r.running() || round < minProbeRounds; round++ {
		r.pause(ttl/2, ttl)
		got := p.wait()
		var restarted time.Time
		from := r.rec.Now()
		desc := "kill -9 valkey-server under a waiter, restart it empty"
		if aof {
			desc = "kill -9 valkey-server under a waiter, restart it on its AOF"
		}
		r.h.Fault(desc, !aof, func() {
			srv.Kill()
			restarted = time.Now()
			srv.Restart()
		})
		restarts++
		if !aof {
			p.granted(got, restarted, "the restart (from its start) that freed the key")
		} else {
			p.stillHeld()
			p.awaitWatching() // so that it is the release that wakes the waiter
			p.granted(got, p.release(), "a release after a restart on the AOF")
		}
		if p.deadConnAttempts(from) > 0 {
			deadConn++
		}
	}
	p.stop()
	res := r.finish(rowOptions{})
	t.Logf("%d restarts; in %d of them a call of the probe's clients met a connection that died with the server (an acquire attempt then waits its Retry); %d operations checked by the model",
		restarts, deadConn, res.Checked)
	if !aof {
		r.withoutDataLoss()
	}
}

// stillHeld checks that the probe's holder still holds its lease after a
// restart on the append-only file: it renews it, asking again while the
// renewal fails. A renewal, like the release that follows, is a script
// that valkey-go does not send again by itself, so its first attempt may
// meet a connection that died with the server (EOF, outcome unknown); a
// renewal can be tried again, a release cannot.
func (p *probe) stillHeld() {
	p.t.Helper()
	deadline := time.Now().Add(wakeBound)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := p.holder.Renew(ctx)
		cancel()
		switch {
		case err == nil:
			return
		case errors.Is(err, lease.ErrLost):
			p.t.Fatalf("the probe's holder lost its lease in a restart on the append-only file: %v", err)
		case time.Now().After(deadline):
			p.t.Fatalf("the probe's holder could not renew its lease within %v of the restart: %v", wakeBound, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
