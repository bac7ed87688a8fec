package testserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/testkit/testserver"
)

// setGetAcrossSlots writes and reads keys that land on different primaries.
func setGetAcrossSlots(ctx context.Context, t *testing.T, client valkey.Client, prefix string) {
	t.Helper()
	for i := range 20 {
		key := fmt.Sprintf("%s-%d", prefix, i)
		if err := client.Do(ctx, client.B().Set().Key(key).Value(key).Build()).Error(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		if got, err := client.Do(ctx, client.B().Get().Key(key).Build()).ToString(); err != nil || got != key {
			t.Fatalf("GET %s = %q, %v", key, got, err)
		}
	}
}

func TestStartValkeyCluster(t *testing.T) {
	t.Parallel()
	c := testserver.StartValkeyCluster(t, 3)
	ctx := t.Context()
	addrs := c.Addrs()
	if len(addrs) != 3 || len(c.Nodes()) != 3 {
		t.Fatalf("Addrs() = %v, %d nodes; want 3 primaries", addrs, len(c.Nodes()))
	}
	for _, addr := range addrs {
		node := newValkeyClient(t, addr)
		info, err := node.Do(ctx, node.B().ClusterInfo().Build()).ToString()
		if err != nil {
			t.Fatalf("CLUSTER INFO on %s: %v", addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_size:3") {
			t.Errorf("CLUSTER INFO on %s:\n%s\nwant cluster_state:ok and cluster_size:3", addr, info)
		}
	}

	client := newValkeyClient(t, addrs...)
	if got := len(client.Nodes()); got != 3 {
		t.Errorf("cluster client knows %d nodes; want 3", got)
	}
	t.Logf("dedicated Valkey %s cluster at %v", valkeyVersion(ctx, t, newValkeyClient(t, addrs[0])), addrs)

	// Keys in different slots need different primaries.
	slots := map[int64]bool{}
	for i := range 20 {
		slot, err := client.Do(ctx, client.B().ClusterKeyslot().Key(fmt.Sprintf("k-%d", i)).Build()).AsInt64()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		slots[slot*3/16384] = true
	}
	if len(slots) != 3 {
		t.Fatalf("test keys cover %d of 3 slot ranges", len(slots))
	}
	setGetAcrossSlots(ctx, t, client, "k")
}

func TestSharedValkeyCluster(t *testing.T) {
	t.Parallel()
	c := testserver.ValkeyCluster(t)
	client := newValkeyClient(t, c.Addrs()...)
	setGetAcrossSlots(t.Context(), t, client, t.Name())
}
