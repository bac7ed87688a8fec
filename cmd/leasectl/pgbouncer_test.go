package main_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// TestPgBouncerTransactionMode runs leasectl through a real PgBouncer 1.18
// in transaction mode, with one server session that a service's pool (in
// pgx's default exec mode) shares: every run of inspect, list, check, gc
// and migrate works, again and again, because leasectl prepares no named
// statement that could meet another client's on the session.
func TestPgBouncerTransactionMode(t *testing.T) {
	t.Parallel()
	url := testserver.Postgres(t).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	direct, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if err := leasepostgres.Migrate(ctx, direct, leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := fencepostgres.Migrate(ctx, direct, fencepostgres.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	bouncer := testserver.PgBouncer(t, url, "transaction", 1)

	// A service behind the pooler, in pgx's default exec mode, which
	// prepares named statements on the one server session: it holds a
	// lease and has inspected it.
	cfg, err := pgxpool.ParseConfig(bouncer)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	service, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer service.Close()
	store, err := leasepostgres.New(service, leasepostgres.Options{DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Acquire(ctx, lease.AcquireRequest{Key: "billing/nightly", Owner: "service", Nonce: "n", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Inspect(ctx, "billing/nightly"); err != nil {
		t.Fatal(err)
	}

	// pgx's default exec mode, asked for in the URL, collides with the
	// service's statements on the session, and the error says what to do.
	run(t, nil, "--postgres", bouncer+"&default_query_exec_mode=cache_statement", "inspect", "billing/nightly").
		want(t, 1, "default_query_exec_mode=exec", "connection pooler in transaction mode")

	ctl := func(args ...string) result {
		return run(t, nil, append([]string{"--postgres", bouncer, "--disable-notify"}, args...)...)
	}
	// check's pooler probe leaves the session it pinned; it runs once.
	ctl("check").want(t, 0, "ok: no problem found", "release notifications are off")
	for range 2 {
		ctl("inspect", "billing/nightly").want(t, 0, "billing/nightly", "held", "service")
		ctl("list").want(t, 0, "billing/nightly", "ACQUIRED")
		ctl("gc", "--dry-run").want(t, 0, "would remove 0 records")
		ctl("migrate", "--only", "lease,fence").want(t, 0, "applied 0 migration(s)")
		ctl("migrate", "--status", "--only", "lease,fence").want(t, 0, "004_lease_history")
	}
}
