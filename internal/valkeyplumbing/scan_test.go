package valkeyplumbing_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/valkeyplumbing"
)

// TestScanPrimaries walks the keys under a prefix on every primary of a
// cluster, in small pages: each key is found, keys of other types and
// names are not, and cursors that name no primary are refused.
func TestScanPrimaries(t *testing.T) {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: testserver.ValkeyCluster(t).Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("scan*test?[%d]:", time.Now().UnixNano())
	var want []string
	for i := range 40 {
		k := fmt.Sprintf("%s{%d}", prefix, i)
		want = append(want, k)
		if err := c.Do(ctx, c.B().Hset().Key(k).FieldValue().FieldValue("f", "v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, c.B().Set().Key(k+"-string").Value("v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, c.B().Hset().Key(strings.TrimSuffix(prefix, ":")+"x{"+fmt.Sprint(i)+"}").FieldValue().FieldValue("f", "v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	primaries, err := valkeyplumbing.Primaries(ctx, c)
	if err != nil || len(primaries) < 2 {
		t.Fatalf("Primaries = %v, %v; want the cluster's primaries", primaries, err)
	}
	var got []string
	cursor := ""
	for pages := 0; pages == 0 || cursor != ""; pages++ {
		keys, next, err := valkeyplumbing.ScanPrimaries(ctx, c, cursor, valkeyplumbing.GlobEscape(prefix)+"{*}", "hash", 5)
		if err != nil || pages > 10000 {
			t.Fatalf("ScanPrimaries(%q): %v (page %d)", cursor, err, pages)
		}
		for _, k := range keys {
			if !slices.Contains(got, k) {
				got = append(got, k)
			}
		}
		cursor = next
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the walk found %d keys %q; want %d", len(got), got, len(want))
	}
	for _, bad := range []string{"x", "1@nowhere:1", "-1@" + primaries[0]} {
		if _, _, err := valkeyplumbing.ScanPrimaries(ctx, c, bad, "*", "", 1); err == nil {
			t.Errorf("cursor %q accepted", bad)
		}
	}
}
