package main_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// TestValkeyCluster runs leasectl as an operator would against a real
// cluster of three primaries: list (every primary, in pages), inspect,
// watch, a forced release, fence show and check.
func TestValkeyCluster(t *testing.T) {
	t.Parallel()
	addrs := testserver.ValkeyCluster(t).Addrs()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	prefix := unique("ctl") + ":"
	store, err := leasevalkey.New(client, leasevalkey.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	held := map[string]lease.Acquisition{}
	for i := range n {
		key := fmt.Sprintf("job/%d", i)
		a := lease.Acquisition{Key: key, Owner: "worker-" + strconv.Itoa(i%3), Nonce: unique("nonce")}
		a.Token, err = store.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		held[key] = a
	}
	// The keys must live on every primary, or the listing proves nothing.
	for _, addr := range addrs {
		node, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		keys, err := node.Do(ctx, node.B().Keys().Pattern(prefix+"*").Build()).AsStrSlice() // the test may; leasectl never does
		node.Close()
		if err != nil || len(keys) == 0 {
			t.Fatalf("primary %s holds %d of the test's keys (%v); the test needs keys on every primary", addr, len(keys), err)
		}
	}
	conn := []string{"--valkey", strings.Join(addrs[:1], ","), "--valkey-prefix", prefix}
	ctl := func(args ...string) result { return run(t, nil, append(slices.Clone(conn), args...)...) }

	t.Run("list", func(t *testing.T) {
		r := ctl("list", "--json")
		r.want(t, 0)
		l := decode[listing](t, r)
		if len(l.Leases) != n || l.NextCursor != "" {
			t.Fatalf("list: %d leases, cursor %q; want %d and none", len(l.Leases), l.NextCursor, n)
		}
		for _, got := range l.Leases {
			a := held[got.Key]
			if got.State != "held" || got.Owner != a.Owner || got.Token != uint64(a.Token) || got.RemainingMS <= 0 {
				t.Fatalf("list record %+v, want held by %q with token %d", got, a.Owner, a.Token)
			}
		}
		ctl("list").want(t, 0, "KEY", "STATE", "OWNER", "TOKEN", "REMAINING", "job/7", "worker-1", held["job/7"].Token.String())
		l = decode[listing](t, ctl("list", "--prefix", "job/1", "--json"))
		if len(l.Leases) != 11 {
			t.Fatalf("list --prefix job/1: %d leases, want 11 (job/1, job/10…19)", len(l.Leases))
		}
	})

	t.Run("list in pages", func(t *testing.T) {
		seen := map[string]bool{}
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatal("listing in pages does not end")
			}
			args := []string{"list", "--json", "--limit", "1"}
			if cursor != "" {
				args = append(args, "--cursor", cursor)
			}
			r := ctl(args...)
			r.want(t, 0)
			l := decode[listing](t, r)
			for _, got := range l.Leases {
				seen[got.Key] = true
			}
			if cursor = l.NextCursor; cursor == "" {
				break
			}
		}
		if len(seen) != n {
			t.Fatalf("pages listed %d distinct keys, want %d", len(seen), n)
		}
		ctl("list", "--limit", "1").want(t, 0, "more: continue with --cursor")
	})

	t.Run("inspect", func(t *testing.T) {
		ctl("inspect", "job/3").want(t, 0, "job/3", "held", "worker-0", held["job/3"].Token.String())
		ctl("inspect", "never/acquired").want(t, 3, "no record")
		ctl("inspect", "").want(t, 2)
	})

	t.Run("watch and force release", func(t *testing.T) {
		a := held["job/4"]
		w := startWatch(t, nil, append(slices.Clone(conn), "watch", "--interval", "50ms", "job/4")...)
		if l := w.next(t); !strings.Contains(l, "held") || !strings.Contains(l, a.Token.String()) {
			t.Fatalf("watch's first line %q, want the holder", l)
		}
		ctl("release", "--force", "job/4").want(t, 2, "would expire the lease", "--yes")
		ctl("release", "--force", "--yes", "--token", "12345", "job/4").want(t, 3, "nothing changed", "not 12345")
		ctl("inspect", "job/4").want(t, 0, "held")
		ctl("release", "--force", "--yes", "--token", a.Token.String(), "job/4").want(t, 0,
			"expired the lease on \"job/4\"", a.Owner, "token stays "+a.Token.String(), "next holder's token is higher")
		if l := w.next(t); !strings.Contains(l, "released") || !strings.Contains(l, a.Owner) {
			t.Fatalf("watch after the forced release: %q, want released", l)
		}
		ctl("release", "--force", "--yes", "job/4").want(t, 3, "not held")
		if err := store.Renew(ctx, a, time.Hour); err == nil {
			t.Fatal("the old holder renewed after the forced release")
		}
		tok, err := store.Acquire(ctx, lease.AcquireRequest{Key: "job/4", Owner: "next", Nonce: unique("n"), TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if tok <= a.Token {
			t.Fatalf("token after the forced release %d, want above %d", tok, a.Token)
		}
		if l := w.next(t); !strings.Contains(l, "acquired") || !strings.Contains(l, tok.String()) {
			t.Fatalf("watch after the next acquisition: %q", l)
		}
		w.interrupt(t)
	})

	t.Run("watch sees an expiry", func(t *testing.T) {
		tok, err := store.Acquire(ctx, lease.AcquireRequest{Key: "short", Owner: "brief", Nonce: unique("n"), TTL: 1500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		w := startWatch(t, nil, append(slices.Clone(conn), "watch", "--interval", "50ms", "short")...)
		if l := w.next(t); !strings.Contains(l, "held") || !strings.Contains(l, tok.String()) {
			t.Fatalf("watch's first line %q, want the holder", l)
		}
		if l := w.next(t); !strings.Contains(l, "expired") || !strings.Contains(l, "brief") {
			t.Fatalf("watch after the TTL: %q, want expired", l)
		}
		w.interrupt(t)
	})

	t.Run("fence show", func(t *testing.T) {
		fp := unique("fence") + ":"
		fv, err := fencevalkey.New(client, fencevalkey.Options{Prefix: fp})
		if err != nil {
			t.Fatal(err)
		}
		a := held["job/5"]
		if err := fv.Claim(ctx, lease.Snapshot{Key: a.Key, Owner: a.Owner, Token: a.Token}, "reports/5"); err != nil {
			t.Fatal(err)
		}
		ctl("--fence-prefix", fp, "fence", "show", "reports/5").want(t, 0, "reports/5", "job/5", a.Token.String(), "holds the lease's current token")
		ctl("--fence-prefix", fp, "fence", "show", "reports/none").want(t, 3, "has no fence")
	})

	t.Run("gc", func(t *testing.T) {
		fp := unique("fence") + ":"
		fv, err := fencevalkey.New(client, fencevalkey.Options{Prefix: fp})
		if err != nil {
			t.Fatal(err)
		}
		// A crashed holder: its lease expires and nobody releases it, so
		// only a sweep removes its record.
		tok, err := store.Acquire(ctx, lease.AcquireRequest{Key: "crashed", Owner: "gone", Nonce: unique("nonce"), TTL: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := fv.Claim(ctx, lease.Snapshot{Key: "crashed", Owner: "gone", Token: tok}, "reports/gc"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		gc := func(args ...string) result {
			return ctl(append([]string{"--fence-prefix", fp, "--retention", "10ms", "gc"}, args...)...)
		}
		ctl("--fence-prefix", fp, "gc", "--dry-run").want(t, 0, "would remove 0 records")
		r := gc("--dry-run", "--json")
		r.want(t, 0)
		dry := decode[struct {
			WouldRemove []struct{ Kind, Name string } `json:"would_remove"`
		}](t, r)
		// "short" expired in the watch subtest: its record goes too.
		want := map[string]bool{"lease crashed": true, "lease short": true, "fence reports/gc": true}
		if len(dry.WouldRemove) != len(want) {
			t.Fatalf("gc --dry-run --json listed %+v, want %v", dry.WouldRemove, want)
		}
		for _, w := range dry.WouldRemove {
			if !want[w.Kind+" "+w.Name] {
				t.Fatalf("gc --dry-run --json listed %+v, want %v", dry.WouldRemove, want)
			}
		}
		gc().want(t, 0, "removed 3 records")
		ctl("inspect", "crashed").want(t, 3, "no record")
		ctl("--fence-prefix", fp, "fence", "show", "reports/gc").want(t, 3, "has no fence")
		for _, a := range held {
			ctl("inspect", a.Key).want(t, 0, a.Key)
		}
	})

	t.Run("check", func(t *testing.T) {
		r := ctl("check", "--json")
		r.want(t, 0)
		c := decode[struct {
			OK       bool     `json:"ok"`
			Problems []string `json:"problems"`
			Target   string   `json:"target"`
		}](t, r)
		if !c.OK || len(c.Problems) != 0 || !strings.Contains(c.Target, "cluster") {
			t.Fatalf("check on the test cluster: %+v", c)
		}
	})
}

// TestValkeyCheckFails points check at a server whose eviction policy can
// drop lease records.
func TestValkeyCheckFails(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{ExtraArgs: []string{"--maxmemory-policy", "allkeys-lru"}})
	run(t, nil, "--valkey", srv.Addr(), "check").want(t, 3, "problem:", "allkeys-lru")
	run(t, []string{"VALKEY_URL=valkey://" + srv.Addr()}, "check", "--json").want(t, 3, `"ok":false`)
}
