package main_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// TestPostgres runs leasectl as an operator would against a real
// PostgreSQL: list (in pages), inspect, watch, a forced release that wakes
// a waiting client, fence show and check, with the connection given as a
// flag, as DATABASE_URL and as PG* variables.
func TestPostgres(t *testing.T) {
	t.Parallel()
	url := testserver.Postgres(t).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
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
	store, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const n = 12
	held := map[string]lease.Acquisition{}
	for i := range n {
		key := fmt.Sprintf("billing/%02d", i)
		a := lease.Acquisition{Key: key, Owner: fmt.Sprintf("billing-worker/%d", i%2), Nonce: unique("nonce")}
		a.Token, err = store.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		held[key] = a
	}
	conn := []string{"--postgres", url}
	ctl := func(args ...string) result { return run(t, nil, append(slices.Clone(conn), args...)...) }

	t.Run("list", func(t *testing.T) {
		l := decode[listing](t, ctl("list", "--json"))
		if len(l.Leases) != n {
			t.Fatalf("list: %d leases, want %d", len(l.Leases), n)
		}
		for _, got := range l.Leases {
			if a := held[got.Key]; got.State != "held" || got.Owner != a.Owner || got.Token != uint64(a.Token) {
				t.Fatalf("list record %+v, want held by %q with token %d", got, a.Owner, a.Token)
			}
		}
		ctl("list", "--prefix", "billing/1").want(t, 0, "billing/10", "billing/11", "billing-worker/1")
		// --limit is a hard limit with a cursor to continue.
		for _, limit := range []int{1, 5} {
			seen := 0
			for cursor, pages := "", 0; ; pages++ {
				args := []string{"list", "--json", "--limit", fmt.Sprint(limit)}
				if cursor != "" {
					args = append(args, "--cursor", cursor)
				}
				l := decode[listing](t, ctl(args...))
				if len(l.Leases) > limit || len(l.Leases) < limit && l.NextCursor != "" {
					t.Fatalf("list --limit %d printed %d keys and cursor %q", limit, len(l.Leases), l.NextCursor)
				}
				seen += len(l.Leases)
				if cursor = l.NextCursor; cursor == "" || pages > n {
					break
				}
			}
			if seen != n {
				t.Fatalf("pages of %d listed %d keys, want %d", limit, seen, n)
			}
		}
		r := ctl("list", "--limit", "1")
		r.want(t, 0, "billing/00", "more: continue with --cursor \"billing/00\"")
		if strings.Contains(r.stdout, "billing/01") {
			t.Fatalf("list --limit 1 printed more than one key:\n%s", r.stdout)
		}
		if l := decode[listing](t, ctl("list", "--json", "--limit", fmt.Sprint(n))); len(l.Leases) != n || l.NextCursor != "" {
			t.Fatalf("list --limit %d of %d keys: %d keys, cursor %q; want all and no cursor", n, n, len(l.Leases), l.NextCursor)
		}
	})

	t.Run("environment", func(t *testing.T) {
		run(t, []string{"DATABASE_URL=" + url}, "inspect", "billing/03").want(t, 0, "billing/03", "held")
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		env := []string{"PGHOST=" + cfg.Host, fmt.Sprintf("PGPORT=%d", cfg.Port), "PGUSER=" + cfg.User, "PGDATABASE=" + cfg.Database, "PGSSLMODE=disable"}
		run(t, env, "inspect", "billing/03").want(t, 0, "billing/03", "held")
		run(t, env, "inspect", "nothing/here").want(t, 3, "no record")
	})

	t.Run("watch and force release wake a waiter", func(t *testing.T) {
		a := held["billing/04"]
		w := startWatch(t, nil, append(slices.Clone(conn), "watch", "--json", "--interval", "50ms", "billing/04")...)
		if l := w.next(t); !strings.Contains(l, `"event":"held"`) || !strings.Contains(l, a.Token.String()) {
			t.Fatalf("watch's first line %q, want the holder", l)
		}
		client, err := lease.NewClient(store, lease.ClientOptions{Owner: "waiter"})
		if err != nil {
			t.Fatal(err)
		}
		// Retry is long: only the release notification makes the waiter
		// acquire within a few seconds.
		p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 5 * time.Minute, Wait: time.Minute, Retry: 40 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *lease.Handle, 1)
		go func() {
			h, err := client.Acquire(ctx, "billing/04", p)
			if err != nil {
				t.Error(err)
			}
			got <- h
		}()
		time.Sleep(500 * time.Millisecond) // let the waiter listen
		ctl("release", "--force", "--yes", "--json", "billing/04").want(t, 0, `"released":true`, a.Owner)
		var h *lease.Handle
		select {
		case h = <-got:
		case <-time.After(20 * time.Second):
			t.Fatal("the waiter did not acquire within 20s of the forced release")
		}
		if h == nil {
			t.FailNow()
		}
		defer h.Release(context.Background())
		if h.Token() <= a.Token {
			t.Fatalf("the waiter's token %d, want above %d", h.Token(), a.Token)
		}
		// force_released where the backend records how a lease ended,
		// released where it does not.
		if l := w.next(t); !strings.Contains(l, `"event":"force_released"`) && !strings.Contains(l, `"event":"released"`) && !strings.Contains(l, `"event":"acquired"`) {
			t.Fatalf("watch after the forced release: %q", l)
		}
		if err := store.Renew(ctx, a, time.Hour); err == nil {
			t.Fatal("the old holder renewed after the forced release")
		}
		w.interrupt(t)
	})

	t.Run("fence show", func(t *testing.T) {
		a := held["billing/05"]
		if err := fencepostgres.Claim(ctx, pool, lease.Snapshot{Key: a.Key, Owner: a.Owner, Token: a.Token}, "invoices/2026-11"); err != nil {
			t.Fatal(err)
		}
		ctl("fence", "show", "invoices/2026-11").want(t, 0, "invoices/2026-11", "billing/05", a.Token.String())
		r := ctl("fence", "show", "--json", "invoices/2026-11")
		f := decode[struct {
			Fenced   bool   `json:"fenced"`
			LeaseKey string `json:"lease_key"`
			Token    uint64 `json:"token"`
		}](t, r)
		if !f.Fenced || f.LeaseKey != a.Key || f.Token != uint64(a.Token) {
			t.Fatalf("fence show --json: %+v", f)
		}
		ctl("fence", "show", "invoices/none").want(t, 3, "has no fence")
	})

	t.Run("check", func(t *testing.T) {
		ctl("check").want(t, 0, "ok: no problem found", "advice:", "idle_in_transaction_session_timeout")
		ctl("--table", "missing", "check").want(t, 3, "problem:", "not found")
	})

	t.Run("gc", func(t *testing.T) {
		a := held["billing/06"]
		if err := fencepostgres.Claim(ctx, pool, lease.Snapshot{Key: a.Key, Owner: a.Owner, Token: a.Token}, "invoices/gc"); err != nil {
			t.Fatal(err)
		}
		if err := store.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
		// With the default retention nothing has ended a day ago.
		ctl("gc", "--dry-run").want(t, 0, "would remove 0 records")
		time.Sleep(50 * time.Millisecond)
		ctl("gc", "--dry-run", "--retention", "10ms").want(t, 0, "lease\tbilling/06", "fence\tinvoices/gc")
		ctl("inspect", "billing/06").want(t, 0, "billing/06")
		ctl("gc", "--retention", "10ms").want(t, 0, "removed")
		ctl("inspect", "billing/06").want(t, 3, "no record")
		ctl("fence", "show", "invoices/gc").want(t, 3, "has no fence")
		// The floor still refuses the released holder's token below it.
		err := fencepostgres.Claim(ctx, pool, lease.Snapshot{Key: a.Key, Owner: a.Owner, Token: a.Token - 1}, "invoices/gc")
		if !errors.Is(err, fence.ErrStale) {
			t.Fatalf("a token below the retired fence's after gc: %v, want fence.ErrStale", err)
		}
		for _, b := range held {
			if b.Key != a.Key && b.Key != "billing/04" { // released above
				ctl("inspect", b.Key).want(t, 0, b.Key)
			}
		}
	})
}

// TestPostgresWatchBadStart watches a key in a database without the lease
// table: watch exits 1 at once with the error (JSON too), instead of
// printing it and waiting for Ctrl-C.
func TestPostgresWatchBadStart(t *testing.T) {
	t.Parallel()
	url := testserver.Postgres(t).NewDatabase(t)
	start := time.Now()
	r := runFor(t, 20*time.Second, nil, "--postgres", url, "watch", "k")
	r.want(t, 1, "watch \"k\"", "leases")
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("watch took %v to fail", took)
	}
	if r.stdout != "" {
		t.Fatalf("watch printed on stdout: %s", r.stdout)
	}
	e := decode[jsonError](t, runFor(t, 20*time.Second, nil, "--postgres", url, "watch", "--json", "k"))
	if e.Exit != 1 || e.Kind != "error" || !strings.Contains(e.Error, "watch") {
		t.Fatalf("watch --json without the table: %+v", e)
	}
}
