package testserver

import (
	"context"
	"fmt"
	"slices"
	"strconv"
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
	nodes []*ValkeyServer
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
