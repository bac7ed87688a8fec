package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/internal/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.MainLeakChecked(m)) }

// TestRun runs the example against the harness's PostgreSQL server.
func TestRun(t *testing.T) {
	url := testserver.Postgres(t).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, config{url: url, emails: 20, ttl: time.Second}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"20 emails, TTL 1s\n",
		"worker-b claims email-00 with token ",
		"email-00 was taken over and sent by worker-",
		"(attempt 2)\n",
		"worker-b wakes up; its completion is refused: fence: resource \"emails/email-00\": token ",
		"20 emails sent, 20 rows written: each exactly once\n",
		"3 workers share 6 shards:\n",
		"worker-c leaves; its shards move:\n",
		"every shard has one owner: [shard-0 shard-1 shard-2 shard-3 shard-4 shard-5]\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	t.Log("\n" + out.String())
}
