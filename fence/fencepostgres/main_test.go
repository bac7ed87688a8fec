package fencepostgres_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newPool returns a pool on a fresh database of the shared server, with
// the default fences table migrated.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := testserver.Postgres(t).NewDatabase(t)
	ctx := ctxT(t)
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

// snap returns a snapshot of lease key with token.
func snap(key string, token lease.Token) lease.Snapshot {
	return lease.Snapshot{Key: key, Owner: "owner-of-" + token.String(), Token: token}
}

func wantStale(t *testing.T, err error, token, current lease.Token) {
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
