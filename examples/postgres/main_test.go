package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// TestRun runs the example against the harness's server, twice, without
// and with the PgBouncer settings: the second run gets a higher token and
// its fenced write is accepted too.
func TestRun(t *testing.T) {
	url := testserver.Postgres(t).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, pgbouncer := range []bool{false, true} {
		var out bytes.Buffer
		if err := run(ctx, url, pgbouncer, &out); err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
		for _, want := range []string{
			`acquired "reports/daily" with token`,
			"wrote the report under token",
			"published the report under the lease",
			"released; shutting down",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var published bool
	var fenced int64
	err = pool.QueryRow(ctx, `SELECT r.published, f.token FROM reports r, lease_fences f
		WHERE r.name = 'daily' AND f.resource = 'reports/daily'`).Scan(&published, &fenced)
	if err != nil || !published || fenced <= 0 {
		t.Fatalf("report published %v, fence token %d, %v; want published under a fence", published, fenced, err)
	}
}

// TestStaleWriteIsRefused: a write with a token below the last one that
// wrote the report is refused, and leaves the report as it was.
func TestStaleWriteIsRefused(t *testing.T) {
	url := testserver.Postgres(t).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, url, false, &bytes.Buffer{}); err != nil { // creates the tables
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var current int64
	if err := pool.QueryRow(ctx, `SELECT token FROM lease_fences WHERE resource = 'reports/daily'`).Scan(&current); err != nil {
		t.Fatal(err)
	}
	snap := func(tok int64) lease.Snapshot {
		return lease.Snapshot{Key: "reports/daily", Owner: "test", Token: lease.Token(tok), Deadline: time.Now().Add(time.Minute)}
	}
	if err := writeReport(ctx, pool, snap(current-1), "stale"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("writeReport with token %d below %d: %v, want fence.ErrStale", current-1, current, err)
	}
	if err := writeReport(ctx, pool, snap(current+1), "newer"); err != nil {
		t.Fatalf("writeReport with a newer token: %v", err)
	}
	var body string
	if err := pool.QueryRow(ctx, `SELECT body FROM reports WHERE name = 'daily'`).Scan(&body); err != nil || body != "newer" {
		t.Fatalf("report body %q, %v; want the newer write's", body, err)
	}
}
