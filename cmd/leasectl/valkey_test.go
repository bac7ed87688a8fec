package main_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	leasepostgres "github.com/golib/lease/backends/postgres"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/testkit/valkeyacl"
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
		// --limit is a hard limit: each page holds exactly N keys but the
		// last, and the cursors continue to the end.
		for _, limit := range []int{1, 2, 7} {
			seen := map[string]bool{}
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > n {
					t.Fatalf("--limit %d: listing in pages does not end", limit)
				}
				args := []string{"list", "--json", "--limit", strconv.Itoa(limit)}
				if cursor != "" {
					args = append(args, "--cursor", cursor)
				}
				r := ctl(args...)
				r.want(t, 0)
				l := decode[listing](t, r)
				if len(l.Leases) > limit || len(l.Leases) < limit && l.NextCursor != "" {
					t.Fatalf("list --limit %d printed %d keys and cursor %q", limit, len(l.Leases), l.NextCursor)
				}
				for _, got := range l.Leases {
					seen[got.Key] = true
				}
				if cursor = l.NextCursor; cursor == "" {
					break
				}
			}
			if len(seen) != n {
				t.Fatalf("--limit %d: pages listed %d distinct keys, want %d", limit, len(seen), n)
			}
		}
		r := ctl("list", "--limit", "2")
		r.want(t, 0, "more: continue with --cursor")
		if rows := strings.Count(r.stdout, "worker-"); rows != 2 {
			t.Fatalf("list --limit 2 printed %d rows:\n%s", rows, r.stdout)
		}
		l := decode[listing](t, ctl("list", "--json", "--held", "--limit", "3", "--prefix", "job/29"))
		if len(l.Leases) != 1 || l.NextCursor != "" {
			t.Fatalf("list --held --limit 3 --prefix job/29: %d keys, cursor %q; want job/29 alone", len(l.Leases), l.NextCursor)
		}
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
		// Without --yes, a dry run: it says so, changes nothing, and exits
		// as the release would.
		ctl("release", "--force", "job/4").want(t, 0, "dry run: would expire the lease", a.Owner, "nothing changed", "--yes")
		dry := decode[struct {
			DryRun       bool   `json:"dry_run"`
			WouldRelease bool   `json:"would_release"`
			Reason       string `json:"reason"`
		}](t, ctl("release", "--force", "--json", "--token", "12345", "job/4"))
		if !dry.DryRun || dry.WouldRelease || !strings.Contains(dry.Reason, "not 12345") {
			t.Fatalf("a dry run for another token: %+v", dry)
		}
		ctl("release", "--force", "--token", "12345", "job/4").want(t, 3, "dry run", "nothing would change")
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

// TestValkeyACL runs leasectl as a user with the quickstart's ACL rule:
// inspect works; list, which needs SCAN and ROLE besides, names the grant
// to add and where the runbook lists it, and works once it is added.
func TestValkeyACL(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	admin, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	store, err := leasevalkey.New(admin, leasevalkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tok, err := store.Acquire(ctx, lease.AcquireRequest{Key: "reports/daily", Owner: "pod-a", Nonce: unique("n"), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	valkeyacl.Login(t, admin, srv.Addr(), "app", valkeyacl.Quickstart)
	url := "valkey://app:secret@" + srv.Addr()
	run(t, nil, "--valkey", url, "inspect", "reports/daily").want(t, 0, "pod-a", tok.String())
	r := run(t, nil, "--valkey", url, "list")
	r.want(t, 1, "may not run ROLE", `add "+scan +role" to its ACL rule`, "docs/operations.md", "Grants leasectl needs")
	if strings.Contains(r.stderr, "lease scripts need") {
		t.Fatalf("list blames the lease scripts: %s", r.stderr)
	}
	valkeyacl.Login(t, admin, srv.Addr(), "operator", valkeyacl.Quickstart+" "+valkeyacl.Scan)
	run(t, nil, "--valkey", "valkey://operator:secret@"+srv.Addr(), "list").want(t, 0, "reports/daily", "pod-a")
}

// TestValkeyWatchDataLoss watches a key while the server restarts without
// persistence, and while a lower token appears: watch says the record was
// lost, not released, and flags the token going down.
func TestValkeyWatchDataLoss(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	store, err := leasevalkey.New(client, leasevalkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tok, err := store.Acquire(ctx, lease.AcquireRequest{Key: "w", Owner: "pod-w", Nonce: unique("n"), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	names, err := client.Do(ctx, client.B().Keys().Pattern("lease:*").Build()).AsStrSlice()
	if err != nil || len(names) != 1 {
		t.Fatalf("the record's name: %v %v", names, err)
	}
	args := []string{"--valkey", srv.Addr(), "watch", "--interval", "50ms", "w"}
	text := startWatch(t, nil, args...)
	js := startWatch(t, nil, append(args, "--json")...)
	text.until(t, "held")
	js.until(t, `"event":"held"`)

	srv.Restart() // no persistence: the record is gone
	l := text.until(t, "lost")
	for _, s := range []string{"record lost", `owner="pod-w"`, "token=" + tok.String(), "lost data"} {
		if !strings.Contains(l, s) {
			t.Fatalf("watch after the restart: %q lacks %q", l, s)
		}
	}
	if l := js.until(t, `"event":"lost"`); !strings.Contains(l, `"previous":{"key":"w","state":"held","owner":"pod-w","token":`+tok.String()) {
		t.Fatalf("watch --json after the restart: %q", l)
	}

	// A record with a lower token, as a restored backup would bring back.
	low := tok - 1000
	for try := 0; ; try++ { // the client's connection died with the server
		err := client.Do(ctx, client.B().Hset().Key(names[0]).FieldValue().FieldValue("token", low.String()).Build()).Error()
		if err == nil {
			break
		}
		if try == 20 {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	l = text.until(t, "token-down")
	if !strings.Contains(l, fmt.Sprintf("token went DOWN from %d to %d", tok, low)) {
		t.Fatalf("watch after a lower token: %q", l)
	}
	if l := js.until(t, `"event":"token_down"`); !strings.Contains(l, fmt.Sprintf(`"token":%d`, low)) || !strings.Contains(l, fmt.Sprintf(`"highest_token":%d`, tok)) {
		t.Fatalf("watch --json after a lower token: %q", l)
	}
	text.interrupt(t)
	js.interrupt(t)
}

// TestValkeyFenceShowLost shows a resource whose fence key is gone (as an
// allkeys-* policy evicts it): fence show says it may have been lost, and
// with --lease, that the lease has issued tokens, rather than "no fenced
// write has touched it".
func TestValkeyFenceShowLost(t *testing.T) {
	t.Parallel()
	addr := testserver.Valkey(t).Addr()
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lp, fp := unique("lease")+":", unique("fence")+":"
	store, err := leasevalkey.New(client, leasevalkey.Options{Prefix: lp})
	if err != nil {
		t.Fatal(err)
	}
	fv, err := fencevalkey.New(client, fencevalkey.Options{Prefix: fp})
	if err != nil {
		t.Fatal(err)
	}
	nonce := unique("n")
	tok, err := store.Acquire(ctx, lease.AcquireRequest{Key: "billing", Owner: "pod-b", Nonce: nonce, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := fv.Claim(ctx, lease.Snapshot{Key: "billing", Owner: "pod-b", Token: tok}, "invoices/7"); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--valkey", addr, "--valkey-prefix", lp, "--fence-prefix", fp}
	ctl := func(args ...string) result { return run(t, nil, append(slices.Clone(conn), args...)...) }
	ctl("fence", "show", "invoices/7").want(t, 0, "holds the lease's current token")
	if err := client.Do(ctx, client.B().Del().Key(fv.FenceKey("invoices/7")).Build()).Error(); err != nil { // evicted
		t.Fatal(err)
	}
	ctl("fence", "show", "invoices/7").want(t, 3, "has no fence", "or the store lost it", "--lease KEY")
	r := ctl("fence", "show", "--lease", "billing", "invoices/7")
	r.want(t, 3, "has no fence", `though lease "billing" has issued tokens`, tok.String(), "lost by the store", "evicted")
	if strings.Contains(r.stderr, "no fenced write has touched it") {
		t.Fatalf("fence show says no write touched a resource whose lease issued tokens: %s", r.stderr)
	}
	f := decode[struct {
		Fenced bool `json:"fenced"`
		Lease  *struct {
			Token uint64 `json:"token"`
		} `json:"lease"`
		Note string `json:"note"`
	}](t, ctl("fence", "show", "--json", "--lease", "billing", "invoices/7"))
	if f.Fenced || f.Lease == nil || f.Lease.Token != uint64(tok) || !strings.Contains(f.Note, "lost by the store") {
		t.Fatalf("fence show --json --lease: %+v", f)
	}
	ctl("fence", "show", "--lease", "never/acquired", "invoices/none").want(t, 3, "has no fence", "no record")
}

// TestFenceApart keeps the lease in Valkey and the fence in PostgreSQL
// (and the other way round), as docs/fencing.md allows: fence show reads
// each from its own store with --fence-postgres or --fence-valkey, and
// without them it says plainly that the lease store has no record,
// raising no alarm.
func TestFenceApart(t *testing.T) {
	t.Parallel()
	vaddr := testserver.Valkey(t).Addr()
	pgURL := testserver.Postgres(t).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{vaddr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	lp, fp := unique("lease")+":", unique("fence")+":"
	vstore, err := leasevalkey.New(client, leasevalkey.Options{Prefix: lp})
	if err != nil {
		t.Fatal(err)
	}
	fv, err := fencevalkey.New(client, fencevalkey.Options{Prefix: fp})
	if err != nil {
		t.Fatal(err)
	}
	pstore, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pstore.Close()

	// The lease in Valkey, the fence in PostgreSQL.
	vtok, err := vstore.Acquire(ctx, lease.AcquireRequest{Key: "exports", Owner: "pod-v", Nonce: unique("n"), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := fencepostgres.Claim(ctx, pool, lease.Snapshot{Key: "exports", Owner: "pod-v", Token: vtok}, "exports/2026"); err != nil {
		t.Fatal(err)
	}
	run(t, nil, "--valkey", vaddr, "--valkey-prefix", lp, "--fence-postgres", pgURL, "fence", "show", "exports/2026").want(t, 0,
		"exports/2026", "exports", vtok.String(), "pod-v", "holds the lease's current token")
	r := run(t, nil, "--postgres", pgURL, "fence", "show", "exports/2026")
	r.want(t, 0, "no record", "has no record of \"exports\"", "lives in another store", "--fence-postgres")
	if strings.Contains(r.stdout, "lost lease data") || strings.Contains(r.stdout, "above the lease's") {
		t.Fatalf("fence show raises the alarm for a lease kept in another store:\n%s", r.stdout)
	}
	j := decode[struct {
		Fenced     bool   `json:"fenced"`
		Lease      any    `json:"lease"`
		FenceStore string `json:"fence_store"`
	}](t, run(t, nil, "--valkey", vaddr, "--valkey-prefix", lp, "--fence-postgres", pgURL, "fence", "show", "--json", "exports/2026"))
	if !j.Fenced || j.Lease == nil || !strings.Contains(j.FenceStore, "PostgreSQL") {
		t.Fatalf("fence show --json across stores: %+v", j)
	}

	// The lease in PostgreSQL, the fence in Valkey.
	ptok, err := pstore.Acquire(ctx, lease.AcquireRequest{Key: "imports", Owner: "pod-p", Nonce: unique("n"), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := fv.Claim(ctx, lease.Snapshot{Key: "imports", Owner: "pod-p", Token: ptok}, "imports/2026"); err != nil {
		t.Fatal(err)
	}
	run(t, nil, "--postgres", pgURL, "--fence-valkey", vaddr, "--fence-prefix", fp, "fence", "show", "imports/2026").want(t, 0,
		"imports/2026", ptok.String(), "pod-p", "holds the lease's current token")
	run(t, nil, "--postgres", pgURL, "--fence-valkey", vaddr, "--fence-postgres", pgURL, "fence", "show", "x").want(t, 2, "both --fence-valkey and --fence-postgres")
}
