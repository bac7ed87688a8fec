package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golib/lease/internal/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// TestRun runs the example against the harness's server, twice, as
// with and without the PgBouncer settings: the second run gets a higher
// token and its fenced write is accepted too.
func TestRun(t *testing.T) {
	url := testserver.Postgres(t).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, pgbouncer := range []bool{false, true} {
		var out bytes.Buffer
		if err := run(ctx, config{url: url, pgbouncer: pgbouncer}, &out); err != nil {
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
}

// TestStaleWriteIsRefused: a write with a token below the last one that
// wrote the row is refused.
func TestStaleWriteIsRefused(t *testing.T) {
	url := testserver.Postgres(t).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := createReports(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tok  lease.Token
		want bool
	}{{10, true}, {10, true}, {12, true}, {11, false}} {
		ok, err := fencedWrite(ctx, pool, "daily", c.tok, fmt.Sprint("body ", c.tok))
		if err != nil || ok != c.want {
			t.Fatalf("fencedWrite(token %d) = %v, %v; want %v", c.tok, ok, err, c.want)
		}
	}
}
