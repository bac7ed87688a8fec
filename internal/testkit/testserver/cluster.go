package testserver

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterSlots is the number of hash slots in a Valkey cluster.
const clusterSlots = 16384

// sharedClusterPrimaries is the size of the cluster [ValkeyCluster] returns.
const sharedClusterPrimaries = 3

// SharedValkeyCluster is the Valkey cluster shared by the tests of a package.
type SharedValkeyCluster struct {
	addrs []string
}

var clusterShared lazy[*SharedValkeyCluster]

// ValkeyCluster returns the package's shared Valkey cluster of three
// primaries without replicas, starting it on first use. [Main] stops it after
// the tests. It is always started locally: LEASE_VALKEY_ADDR names a
// standalone server.
//
// When the cluster can't be started, ValkeyCluster skips the test, or fails it
// if LEASE_REQUIRE_SERVERS=1. It fails the test if TestMain doesn't call
// [Main]. It is safe for concurrent use.
func ValkeyCluster(t testing.TB) *SharedValkeyCluster {
	t.Helper()
	needMain(t)
	c, err := clusterShared.get(func() (*SharedValkeyCluster, error) {
		nodes, err := startCluster(sharedClusterPrimaries)
		if err != nil {
			return nil, err
		}
		c := &SharedValkeyCluster{}
		for _, vp := range nodes {
			onStopShared(vp.close)
			c.addrs = append(c.addrs, vp.addr())
		}
		return c, nil
	})
	if err != nil {
		unavailable(t, "no shared Valkey cluster", err)
	}
	return c
}

// Addrs returns the addresses (host:port) of the cluster's primaries. Any of
// them is enough to seed a cluster client.
func (c *SharedValkeyCluster) Addrs() []string { return slices.Clone(c.addrs) }

// ValkeyClusterServers is a dedicated Valkey cluster for one test: primaries
// without replicas, each a [ValkeyServer] that can be stopped, killed, paused
// and restarted on its own.
type ValkeyClusterServers struct {
	nodes    []*ValkeyServer // the primaries, in the order of their slots
	replicas []*ValkeyServer
}

// StartValkeyCluster starts a dedicated Valkey cluster of the given number of
// primaries, each serving an equal share of the hash slots, and waits until
// every node reports cluster_state:ok. The servers are stopped and deleted
// when t ends. Nodes keep their cluster configuration in their directory, so a
// restarted node rejoins the cluster.
//
// When the cluster can't be started, StartValkeyCluster skips the test, or
// fails it if LEASE_REQUIRE_SERVERS=1.
func StartValkeyCluster(t testing.TB, primaries int) *ValkeyClusterServers {
	t.Helper()
	if primaries < 1 {
		t.Fatalf("testserver: StartValkeyCluster(%d): need at least one primary", primaries)
	}
	procs, err := startCluster(primaries)
	if err != nil {
		unavailable(t, "can't start a dedicated Valkey cluster", dedicatedErr(err, envValkeyAddr))
	}
	c := &ValkeyClusterServers{}
	for _, vp := range procs {
		t.Cleanup(vp.close)
		c.nodes = append(c.nodes, &ValkeyServer{t: t, vp: vp})
	}
	return c
}

// Addrs returns the addresses (host:port) of the cluster's primaries, in the
// order of their slot ranges.
func (c *ValkeyClusterServers) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns the cluster's primaries, in the order of their slot ranges.
func (c *ValkeyClusterServers) Nodes() []*ValkeyServer { return slices.Clone(c.nodes) }

// startCluster starts n cluster-enabled servers and joins them into one
// cluster.
func startCluster(n int) ([]*valkeyProc, error) {
	procs := make([]*valkeyProc, 0, n)
	for range n {
		vp, err := startValkeyProc(valkeyConfig{cluster: true})
		if err != nil {
			closeAll(procs)
			return nil, err
		}
		procs = append(procs, vp)
	}
	if err := joinCluster(procs); err != nil {
		closeAll(procs)
		return nil, err
	}
	return procs, nil
}

func closeAll(procs []*valkeyProc) {
	for _, vp := range procs {
		vp.close()
	}
}

// joinCluster does what `valkey-cli --cluster create` does for primaries:
// give each node a distinct config epoch and an equal range of slots,
// introduce them to the first node, and wait until every node knows them all
// and sees every slot served.
func joinCluster(procs []*valkeyProc) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	n := len(procs)
	for i, vp := range procs {
		lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		cmds := [][]string{
			{"CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i + 1)},
			{"CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)},
		}
		for _, cmd := range cmds {
			if _, err := respDo(ctx, vp.addr(), cmd...); err != nil {
				return fmt.Errorf("%v on %s: %w", cmd, vp.addr(), err)
			}
		}
	}
	for _, vp := range procs[1:] {
		cmd := []string{"CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(vp.port), strconv.Itoa(vp.busPort)}
		if _, err := respDo(ctx, procs[0].addr(), cmd...); err != nil {
			return fmt.Errorf("%v on %s: %w", cmd, procs[0].addr(), err)
		}
	}
	for {
		pending, why := clusterPending(ctx, procs)
		if pending == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster node %s not ready within %v: %s%s", pending.addr(), readyTimeout, why, logTail(pending.proc.logPath))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clusterPending returns the first node that doesn't yet report
// cluster_state:ok with every node known, and why; or nil when all do.
func clusterPending(ctx context.Context, procs []*valkeyProc) (*valkeyProc, string) {
	want := strconv.Itoa(len(procs))
	for _, vp := range procs {
		info, err := respString(ctx, vp.addr(), "CLUSTER", "INFO")
		switch {
		case err != nil:
			return vp, err.Error()
		case infoField(info, "cluster_state") != "ok":
			return vp, "cluster_state:" + infoField(info, "cluster_state")
		case infoField(info, "cluster_known_nodes") != want:
			return vp, "cluster_known_nodes:" + infoField(info, "cluster_known_nodes") + ", want " + want
		}
	}
	return nil, ""
}

// AddReplica starts a cluster-enabled server, joins it to the cluster as a
// replica of the primary Nodes()[i], and waits until its link to the
// primary is up and every node of the cluster knows it. It is stopped and
// deleted when t ends. Replicas are not among Addrs or Nodes.
func (c *ValkeyClusterServers) AddReplica(t testing.TB, i int) *ValkeyServer {
	t.Helper()
	if i < 0 || i >= len(c.nodes) {
		t.Fatalf("testserver: AddReplica(%d) of a cluster of %d primaries", i, len(c.nodes))
	}
	vp, err := startValkeyProc(valkeyConfig{cluster: true})
	if err != nil {
		unavailable(t, "can't start a Valkey cluster replica", err)
	}
	t.Cleanup(vp.close)
	replica := &ValkeyServer{t: t, vp: vp}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	primary := c.nodes[i].vp
	id := nodeID(ctx, t, primary.addr())
	meet := []string{"CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(primary.port), strconv.Itoa(primary.busPort)}
	if _, err := respDo(ctx, vp.addr(), meet...); err != nil {
		t.Fatalf("testserver: %v on %s: %v", meet, vp.addr(), err)
	}
	c.replicas = append(c.replicas, replica)
	// A node replicates only a node it already knows as a primary.
	waitFor(ctx, t, "replica "+vp.addr()+" to replicate "+primary.addr(), func() error {
		_, err := respDo(ctx, vp.addr(), "CLUSTER", "REPLICATE", id)
		return err
	})
	waitFor(ctx, t, "replica "+vp.addr()+" to sync", func() error {
		info, err := respString(ctx, vp.addr(), "INFO", "replication")
		if err != nil {
			return err
		}
		if v := infoField(info, "master_link_status"); v != "up" {
			return fmt.Errorf("master_link_status:%s", v)
		}
		return c.settled(ctx)
	})
	return replica
}

// Failover promotes replica, made by [ValkeyClusterServers.AddReplica],
// with CLUSTER FAILOVER: the manual failover, in which the primary stops
// taking writes until the replica has caught up, the replica takes its
// slots and the old primary becomes the replica's replica. It waits until
// every node sees the replica as a primary. The two swap places: the
// replica is then among Nodes and Addrs, the old primary is not.
//
// The other primaries vote for a failover of one shard at most once per
// twice cluster-node-timeout (10s here): a second Failover of the same
// shard sooner gets too few votes, changes nothing, and fails t once
// its wait runs out.
func (c *ValkeyClusterServers) Failover(t testing.TB, replica *ValkeyServer) {
	t.Helper()
	r := slices.Index(c.replicas, replica)
	if r < 0 {
		t.Fatalf("testserver: Failover(%s): not a replica of the cluster", replica.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	info, err := respString(ctx, replica.Addr(), "INFO", "replication")
	if err != nil {
		t.Fatalf("testserver: INFO replication on %s: %v", replica.Addr(), err)
	}
	primaryAddr := net.JoinHostPort(infoField(info, "master_host"), infoField(info, "master_port"))
	i := slices.IndexFunc(c.nodes, func(n *ValkeyServer) bool { return n.Addr() == primaryAddr })
	if i < 0 {
		t.Fatalf("testserver: Failover: %s replicates %s, not a primary of the cluster", replica.Addr(), primaryAddr)
	}
	if _, err := respDo(ctx, replica.Addr(), "CLUSTER", "FAILOVER"); err != nil {
		t.Fatalf("testserver: CLUSTER FAILOVER on %s: %v", replica.Addr(), err)
	}
	c.nodes[i], c.replicas[r] = replica, c.nodes[i]
	id := nodeID(ctx, t, replica.Addr())
	waitFor(ctx, t, "the failover to "+replica.Addr(), func() error {
		for _, n := range c.all() {
			nodes, err := respString(ctx, n.Addr(), "CLUSTER", "NODES")
			if err != nil {
				return err
			}
			if !nodeIsPrimary(nodes, id) {
				return fmt.Errorf("%s does not see %s as a primary yet", n.Addr(), replica.Addr())
			}
		}
		return c.settled(ctx)
	})
}

// MoveSlot migrates one hash slot, with its keys, from the primary that
// serves it to Nodes()[dst], as valkey-cli --cluster reshard does: CLUSTER
// SETSLOT IMPORTING on dst and MIGRATING on the source, MIGRATE of every
// key, then SETSLOT NODE on both. It waits until every node sees dst as the
// slot's owner.
func (c *ValkeyClusterServers) MoveSlot(t testing.TB, slot, dst int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	to := c.nodes[dst]
	from := c.owner(ctx, t, slot, c.nodes[0].Addr())
	if from == to {
		return
	}
	fromID, toID, sl := nodeID(ctx, t, from.Addr()), nodeID(ctx, t, to.Addr()), strconv.Itoa(slot)
	do := func(addr string, args ...string) any {
		t.Helper()
		reply, err := respDo(ctx, addr, args...)
		if err != nil {
			t.Fatalf("testserver: %v on %s: %v", args, addr, err)
		}
		return reply
	}
	do(to.Addr(), "CLUSTER", "SETSLOT", sl, "IMPORTING", fromID)
	do(from.Addr(), "CLUSTER", "SETSLOT", sl, "MIGRATING", toID)
	host, port, _ := net.SplitHostPort(to.Addr())
	for {
		keys, _ := do(from.Addr(), "CLUSTER", "GETKEYSINSLOT", sl, "100").([]any)
		if len(keys) == 0 {
			break
		}
		args := []string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}
		for _, k := range keys {
			args = append(args, fmt.Sprint(k))
		}
		do(from.Addr(), args...)
	}
	do(to.Addr(), "CLUSTER", "SETSLOT", sl, "NODE", toID)
	do(from.Addr(), "CLUSTER", "SETSLOT", sl, "NODE", toID)
	waitFor(ctx, t, "slot "+sl+" to move to "+to.Addr(), func() error {
		for _, n := range c.nodes {
			if o := c.owner(ctx, t, slot, n.Addr()); o != to {
				return fmt.Errorf("%s still sees %s as the owner", n.Addr(), o.Addr())
			}
		}
		return c.settled(ctx)
	})
}

// owner returns the primary that serves slot, as the node at ask sees it.
func (c *ValkeyClusterServers) owner(ctx context.Context, t testing.TB, slot int, ask string) *ValkeyServer {
	t.Helper()
	reply, err := respDo(ctx, ask, "CLUSTER", "SLOTS")
	if err != nil {
		t.Fatalf("testserver: CLUSTER SLOTS on %s: %v", ask, err)
	}
	ranges, _ := reply.([]any)
	for _, rg := range ranges {
		r, _ := rg.([]any)
		if len(r) < 3 {
			continue
		}
		lo, _ := r[0].(int64)
		hi, _ := r[1].(int64)
		node, _ := r[2].([]any)
		if int64(slot) < lo || int64(slot) > hi || len(node) < 2 {
			continue
		}
		addr := net.JoinHostPort(fmt.Sprint(node[0]), fmt.Sprint(node[1]))
		for _, n := range c.nodes {
			if n.Addr() == addr {
				return n
			}
		}
		t.Fatalf("testserver: slot %d is served by %s, not a primary of the cluster", slot, addr)
	}
	t.Fatalf("testserver: no node serves slot %d", slot)
	return nil
}

// all returns the primaries and the replicas.
func (c *ValkeyClusterServers) all() []*ValkeyServer {
	return append(slices.Clone(c.nodes), c.replicas...)
}

// settled returns nil once every node reports cluster_state:ok and knows
// every other node.
func (c *ValkeyClusterServers) settled(ctx context.Context) error {
	var procs []*valkeyProc
	for _, n := range c.all() {
		procs = append(procs, n.vp)
	}
	if p, why := clusterPending(ctx, procs); p != nil {
		return fmt.Errorf("%s: %s", p.addr(), why)
	}
	return nil
}

// nodeID returns the cluster node ID of the server at addr.
func nodeID(ctx context.Context, t testing.TB, addr string) string {
	t.Helper()
	id, err := respString(ctx, addr, "CLUSTER", "MYID")
	if err != nil {
		t.Fatalf("testserver: CLUSTER MYID on %s: %v", addr, err)
	}
	return id
}

// nodeIsPrimary reports whether the CLUSTER NODES text shows the node id
// as a primary.
func nodeIsPrimary(nodes, id string) bool {
	for line := range strings.SplitSeq(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] == id {
			return slices.Contains(strings.Split(f[2], ","), "master")
		}
	}
	return false
}

// waitFor calls check every 50ms until it returns nil, and fails t if ctx
// ends first, with what it was waiting for and the last error.
func waitFor(ctx context.Context, t testing.TB, what string, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testserver: waiting for %s: %v", what, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
