package main_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	leasepostgres "github.com/golib/lease/backends/postgres"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// TestGroupsValkey runs leasectl on the permits and sets of a standalone
// Valkey server.
func TestGroupsValkey(t *testing.T) {
	t.Parallel()
	groupsOnValkey(t, []string{testserver.Valkey(t).Addr()})
}

// TestGroupsValkeyCluster runs leasectl on the permits and sets of a
// cluster of three primaries, where a set's keys share a hash tag.
func TestGroupsValkeyCluster(t *testing.T) {
	t.Parallel()
	groupsOnValkey(t, testserver.ValkeyCluster(t).Addrs())
}

// TestGroupsPostgres runs leasectl on the permits and sets of a
// PostgreSQL lease table.
func TestGroupsPostgres(t *testing.T) {
	t.Parallel()
	url := migratedDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	groupsSuite(t, store, []string{"--postgres", url})
}

func groupsOnValkey(t *testing.T, addrs []string) {
	t.Helper()
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	prefix := unique("grp") + ":"
	store, err := leasevalkey.New(client, leasevalkey.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	groupsSuite(t, store, []string{"--valkey", strings.Join(addrs[:1], ","), "--valkey-prefix", prefix})
}

// inspected is inspect --permits' JSON output.
type inspected struct {
	Semaphore string `json:"semaphore"`
	Permits   int    `json:"permits"`
	Held      int    `json:"held"`
	Slots     []struct {
		Key       string `json:"key"`
		State     string `json:"state"`
		Owner     string `json:"owner"`
		Token     uint64 `json:"token"`
		Semaphore string `json:"semaphore"`
		Slot      *int   `json:"slot"`
	} `json:"slots"`
}

// groupListing is list's JSON output with what it says of permits and
// sets.
type groupListing struct {
	Leases []struct {
		Key       string `json:"key"`
		State     string `json:"state"`
		Owner     string `json:"owner"`
		Token     uint64 `json:"token"`
		Semaphore string `json:"semaphore"`
		Slot      *int   `json:"slot"`
		Set       int    `json:"set"`
	} `json:"leases"`
	Sets []struct {
		Set   int      `json:"set"`
		Owner string   `json:"owner"`
		Token uint64   `json:"token"`
		Keys  []string `json:"keys"`
	} `json:"sets"`
}

// groupsSuite holds two permits of the semaphore "exports" (of 3) as
// worker-a, a set of two keys and a lease as worker-b, on store, and runs
// leasectl with the connection flags conn to inspect the permits, list
// them with the set, and force-release one permit.
func groupsSuite(t *testing.T, store lease.Backend, conn []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := lease.NewClient(store, lease.ClientOptions{Owner: "worker-a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := lease.NewClient(store, lease.ClientOptions{Owner: "worker-b"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var permits []*lease.Handle
	for range 2 {
		h, err := a.TryAcquirePermit(ctx, "exports", 3, p)
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, h)
	}
	// On a cluster a set's keys must share a hash slot: one tag.
	set, err := b.TryAcquireSet(ctx, []string{"{acct}/42", "{acct}/17"}, p)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := b.TryAcquire(ctx, "plain/1", p)
	if err != nil {
		t.Fatal(err)
	}
	ctl := func(args ...string) result { return run(t, nil, append(slices.Clone(conn), args...)...) }

	t.Run("inspect permits", func(t *testing.T) {
		ctl("inspect", "--permits", "3", "exports").want(t, 0,
			"SLOT", "exports/permit/0", "exports/permit/2", "worker-a", permits[1].Token().String(),
			`2 of 3 permits of semaphore "exports" held`)
		got := decode[inspected](t, ctl("inspect", "--json", "--permits", "3", "exports"))
		if got.Semaphore != "exports" || got.Permits != 3 || got.Held != 2 || len(got.Slots) != 3 {
			t.Fatalf("inspect --permits 3 exports: %+v", got)
		}
		for i, s := range got.Slots {
			if s.Slot == nil || *s.Slot != i || s.Semaphore != "exports" || s.Key != lease.PermitKey("exports", i) {
				t.Fatalf("slot %d: %+v", i, s)
			}
			if held := i < 2; held != (s.State == "held") || held && (s.Owner != "worker-a" || s.Token != uint64(permits[i].Token())) {
				t.Fatalf("slot %d: %+v, want held by worker-a with token %d: %v", i, s, permits[min(i, 1)].Token(), held)
			}
		}
		ctl("inspect", "exports/permit/1").want(t, 0, "SEMAPHORE", "SLOT", "exports/permit/1", "worker-a")
		r := ctl("inspect", "--permits", "4", "nothing")
		r.want(t, 3, `0 of 4 permits of semaphore "nothing" held`, `no permit of semaphore "nothing" below 4 has a record`)
		ctl("inspect", "--permits", "257", "exports").want(t, 2, "out of the range 1 to 256")
		ctl("inspect", "--permits", "-1", "exports").want(t, 2, "out of the range")
	})

	t.Run("list", func(t *testing.T) {
		r := ctl("list")
		r.want(t, 0, "SEMAPHORE", "SLOT", "SET", "set1", "inferred")
		for line := range strings.Lines(r.stdout) {
			f := strings.Fields(line)
			switch {
			case len(f) == 0:
			case strings.HasPrefix(f[0], "exports/permit/"):
				if f[len(f)-3] != "exports" || f[len(f)-1] != "-" {
					t.Errorf("permit row %q: want its semaphore and no set", line)
				}
			case strings.HasPrefix(f[0], "{acct}/"):
				if f[len(f)-1] != "set1" || f[len(f)-3] != "-" {
					t.Errorf("set row %q: want set1 and no semaphore", line)
				}
			case f[0] == "plain/1":
				if f[len(f)-1] != "-" || f[len(f)-2] != "-" {
					t.Errorf("lease row %q: want neither semaphore nor set", line)
				}
			}
		}
		l := decode[groupListing](t, ctl("list", "--json"))
		if len(l.Sets) != 1 || l.Sets[0].Owner != "worker-b" || l.Sets[0].Token != uint64(set.Token()) ||
			!slices.Equal(l.Sets[0].Keys, []string{"{acct}/17", "{acct}/42"}) {
			t.Fatalf("sets %+v, want one of {acct}/17 and {acct}/42 held by worker-b with token %d", l.Sets, set.Token())
		}
		for _, r := range l.Leases {
			_, slot, permit := lease.ParsePermitKey(r.Key)
			switch {
			case permit && (r.Semaphore != "exports" || r.Slot == nil || *r.Slot != slot || r.Set != 0):
				t.Errorf("permit %+v", r)
			case strings.HasPrefix(r.Key, "{acct}/") && (r.Set != 1 || r.Semaphore != "" || r.Slot != nil):
				t.Errorf("set key %+v", r)
			case r.Key == "plain/1" && (r.Set != 0 || r.Semaphore != "" || r.Slot != nil):
				t.Errorf("lease %+v", r)
			}
		}
		// A listing without permits or sets keeps the plain columns.
		r = ctl("list", "--prefix", "plain/")
		r.want(t, 0, "plain/1")
		if strings.Contains(r.stdout, "SEMAPHORE") || strings.Contains(r.stdout, "SET") {
			t.Errorf("list of a lease shows the permit or set columns:\n%s", r.stdout)
		}
		l = decode[groupListing](t, ctl("list", "--json", "--prefix", "exports/permit/"))
		if len(l.Leases) != 2 {
			t.Errorf("list --prefix exports/permit/: %+v, want the two permits", l.Leases)
		}
	})

	t.Run("release a permit", func(t *testing.T) {
		tok := permits[1].Token().String()
		ctl("release", "--force", "exports/permit/1").want(t, 0,
			`dry run: would expire the lease on permit 1 of semaphore "exports" (key "exports/permit/1") held by "worker-a"`)
		ctl("release", "--force", "--yes", "--token", tok, "exports/permit/1").want(t, 0,
			`expired the lease on permit 1 of semaphore "exports" (key "exports/permit/1") held by "worker-a" (token `+tok)
		if err := permits[1].Renew(ctx); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("the released permit renewed: %v", err)
		}
		if err := permits[0].Renew(ctx); err != nil {
			t.Fatalf("the other permit: %v", err)
		}
		ctl("inspect", "--permits", "3", "exports").want(t, 0, `1 of 3 permits of semaphore "exports" held`)
		h, err := b.TryAcquirePermit(ctx, "exports", 3, p)
		if err != nil {
			t.Fatal(err)
		}
		if _, slot, _ := h.Permit(); slot != 1 || h.Token() <= permits[1].Token() {
			t.Fatalf("after the forced release, permit %d with token %d; want slot 1 above %s", slot, h.Token(), tok)
		}
	})

	for _, h := range append(permits, set, plain) {
		h.Release(ctx)
	}
}
