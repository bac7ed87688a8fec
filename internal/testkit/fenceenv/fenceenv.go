// Package fenceenv is the test environment the fence packages share: a
// PostgreSQL database with the fences table, Valkey clients of the shared
// servers, Valkey fences with prefixes of their own, snapshots, and the
// checks of a refusal. Only tests import it.
package fenceenv

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// Ctx returns a context that ends when t does, or after a minute.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Pool returns a pool on a fresh database of the shared PostgreSQL
// server, with the default fences table migrated, closed when t ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := testserver.Postgres(t).NewDatabase(t)
	ctx := Ctx(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return pool
}

// Valkey returns a valkey-go client for the servers at addrs, closed when
// t ends.
func Valkey(t testing.TB, addrs ...string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey.NewClient(%v): %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// Standalone returns a client of the shared standalone Valkey server.
func Standalone(t testing.TB) valkey.Client {
	t.Helper()
	return Valkey(t, testserver.Valkey(t).Addr())
}

// Cluster returns a client of the shared Valkey cluster.
func Cluster(t testing.TB) valkey.Client {
	t.Helper()
	return Valkey(t, testserver.ValkeyCluster(t).Addrs()...)
}

var prefixes atomic.Int64

// Prefix returns a Valkey key prefix no other call of this process
// returns, and unlikely to be one an earlier process used on the shared
// server.
func Prefix() string {
	return fmt.Sprintf("t%d-%d:", time.Now().UnixNano()%1e6, prefixes.Add(1))
}

// Fence returns a Valkey fence on c with a prefix of its own.
func Fence(t testing.TB, c valkey.Client) *fencevalkey.Fence {
	t.Helper()
	v, err := fencevalkey.New(c, fencevalkey.Options{Prefix: Prefix()})
	if err != nil {
		t.Fatalf("fencevalkey.New: %v", err)
	}
	return v
}

// Snap returns a snapshot of lease key with token.
func Snap(key string, token lease.Token) lease.Snapshot {
	return lease.Snapshot{Key: key, Owner: "owner-of-" + token.String(), Token: token}
}

// WantStale fails t unless err is a final *fence.StaleError of token
// against current.
func WantStale(t testing.TB, err error, token, current lease.Token) {
	t.Helper()
	var se *fence.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("err = %v; want a *fence.StaleError", err)
	}
	if se.Token != token || se.Current != current {
		t.Fatalf("StaleError{Token: %d, Current: %d}; want %d, %d", se.Token, se.Current, token, current)
	}
	if fence.IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = true", err)
	}
}

// Walk sweeps s to the end of its walk, limit records a page, and
// returns what it removed.
func Walk(t *testing.T, s lease.Sweeper, limit int, dry bool) []string {
	t.Helper()
	var removed []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("the walk does not end")
		}
		page, err := s.Sweep(t.Context(), lease.SweepOptions{Cursor: cursor, Limit: limit, DryRun: dry})
		if err != nil {
			t.Fatalf("Sweep(cursor %q): %v", cursor, err)
		}
		removed = append(removed, page.Removed...)
		if page.Next == "" {
			return removed
		}
		cursor = page.Next
	}
}
