package main_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// silentListener accepts connections on a loopback port and never answers,
// as a firewall that drops packets or a wedged server would; it stops when
// t ends.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { <-done; c.Close() }()
		}
	}()
	return l.Addr().String()
}

// TestConnectionErrorsNameTheAddress points leasectl at a loopback port that
// speaks HTTP, one that never answers and a closed one: each error names
// the address and what is wrong with it, and a silent port gives up after
// --timeout.
func TestConnectionErrorsNameTheAddress(t *testing.T) {
	t.Parallel()
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	httpAddr := strings.TrimPrefix(web.URL, "http://")
	silent := silentListener(t)
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}()

	run(t, nil, "--valkey", httpAddr, "list").want(t, 1, "Valkey at "+httpAddr, "does not speak RESP")

	start := time.Now()
	run(t, nil, "--postgres", "postgres://u@"+silent+"/db?sslmode=disable", "--timeout", "1s", "list").
		want(t, 1, "PostgreSQL at "+silent, "no answer within 1s")
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("leasectl gave up on a silent PostgreSQL port after %v, want about --timeout (1s)", took)
	}
	run(t, nil, "--postgres", "postgres://u@"+httpAddr+"/db?sslmode=disable", "--timeout", "1s", "inspect", "k").
		want(t, 1, httpAddr)
	run(t, nil, "--postgres", "postgres://u@"+closed+"/db?sslmode=disable", "check").want(t, 1, closed, "connection refused")
	run(t, nil, "--valkey", closed, "list").want(t, 1, "Valkey at "+closed, "connection refused")
}

// TestWrongPrefix looks for a key that exists under another prefix: the
// answer says which prefix was searched and how to change it.
func TestWrongPrefix(t *testing.T) {
	t.Parallel()
	addr := testserver.Valkey(t).Addr()
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	prefix := unique("right") + ":"
	store, err := leasevalkey.New(client, leasevalkey.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := store.Acquire(ctx, lease.AcquireRequest{Key: "billing/nightly", Owner: "o", Nonce: "n", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	wrong := unique("wrong") + ":"
	run(t, nil, "--valkey", addr, "--valkey-prefix", prefix, "inspect", "billing/nightly").want(t, 0, "held")
	run(t, nil, "--valkey", addr, "--valkey-prefix", wrong, "inspect", "billing/nightly").
		want(t, 3, `no record of key "billing/nightly"`, `prefix "`+wrong+`"`, "--valkey-prefix")
	run(t, nil, "--valkey", addr, "--valkey-prefix", wrong, "list").want(t, 0, `no lease records found in Valkey prefix "`+wrong+`"`, "--valkey-prefix")
}

// TestHistoryColumns: list and inspect show when the key was acquired and
// last renewed and how often its holder changed, in the table and in JSON.
func TestHistoryColumns(t *testing.T) {
	t.Parallel()
	addr := testserver.Valkey(t).Addr()
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	prefix := unique("history") + ":"
	store, err := leasevalkey.New(client, leasevalkey.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acquire := func(owner string) lease.Acquisition {
		a := lease.Acquisition{Key: "k", Owner: owner, Nonce: unique("n")}
		if a.Token, err = store.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := acquire("first")
	if err := store.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := acquire("second")
	time.Sleep(20 * time.Millisecond)
	if err := store.Renew(ctx, b, time.Minute); err != nil {
		t.Fatal(err)
	}
	ctl := func(args ...string) result {
		return run(t, nil, append([]string{"--valkey", addr, "--valkey-prefix", prefix}, args...)...)
	}
	ctl("list").want(t, 0, "ACQUIRED", "RENEWED", "CHANGES", " ago")
	r := ctl("inspect", "--json", "k")
	r.want(t, 0)
	got := decode[struct {
		AcquiredAt  time.Time `json:"acquired_at"`
		RenewedAt   time.Time `json:"renewed_at"`
		Transitions uint64    `json:"transitions"`
	}](t, r)
	if got.Transitions != 1 || got.AcquiredAt.IsZero() || !got.RenewedAt.After(got.AcquiredAt) {
		t.Fatalf("inspect --json: %+v; want 1 transition, renewed after acquired", got)
	}
	if d := time.Since(got.AcquiredAt); d < 0 || d > time.Minute {
		t.Fatalf("inspect --json: acquired_at %v, want a moment ago", got.AcquiredAt)
	}
}
