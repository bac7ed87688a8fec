package main_test

import (
	"context"
	"encoding/json"
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

// The tests of watch that follow a key through lease.Client.Observe: each
// watches with --interval 1h, so that only what Observe adds to polling
// (the read when the holder's time runs out, the backend's change
// notifications) can show a change within the test's time.

// valkeyStore returns a Valkey lease store on a throwaway server, and
// leasectl's connection flags for it.
func valkeyStore(t *testing.T) (lease.Backend, []string) {
	t.Helper()
	addr := testserver.Valkey(t).Addr()
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	prefix := unique("watch") + ":"
	store, err := leasevalkey.New(client, leasevalkey.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return store, []string{"--valkey", addr, "--valkey-prefix", prefix}
}

// postgresStore returns a PostgreSQL lease store on a throwaway database,
// and leasectl's connection flags for it.
func postgresStore(t *testing.T) (lease.Backend, []string) {
	t.Helper()
	url := migratedDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := leasepostgres.New(pool, leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store, []string{"--postgres", url}
}

// watchEvent is one line of watch --json.
type watchEvent struct {
	Event       string   `json:"event"`
	State       string   `json:"state"`
	Owner       string   `json:"owner"`
	Token       uint64   `json:"token"`
	Ended       string   `json:"ended"`
	Candidates  []string `json:"candidates"`
	OfferedBy   string   `json:"offered_by"`
	Preferred   string   `json:"preferred"`
	RemainingMS int64    `json:"remaining_ms"`
	Previous    *struct {
		State string `json:"state"`
		Owner string `json:"owner"`
		Token uint64 `json:"token"`
	} `json:"previous"`
}

// event returns the next line of a watch --json, decoded.
func (w *watcher) event(t *testing.T) watchEvent {
	t.Helper()
	l := w.next(t)
	var e watchEvent
	if err := json.Unmarshal([]byte(l), &e); err != nil {
		t.Fatalf("watch --json printed %q: %v", l, err)
	}
	return e
}

func TestWatchExpiryValkey(t *testing.T) {
	t.Parallel()
	store, conn := valkeyStore(t)
	watchExpiry(t, store, conn)
}

func TestWatchExpiryPostgres(t *testing.T) {
	t.Parallel()
	store, conn := postgresStore(t)
	watchExpiry(t, store, conn)
}

// watchExpiry: a holder that stops renewing is seen to expire when its
// time runs out, not at the next --interval, in text and in JSON.
func watchExpiry(t *testing.T, store lease.Backend, conn []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tok, err := store.Acquire(ctx, lease.AcquireRequest{Key: "nightly", Owner: "pod-a", Nonce: unique("n"), TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	args := append(slices.Clone(conn), "watch", "--interval", "1h", "nightly")
	text := startWatch(t, nil, args...)
	js := startWatch(t, nil, append(args, "--json")...)
	if l := text.next(t); !strings.Contains(l, "held") || !strings.Contains(l, `owner="pod-a" token=`+tok.String()) {
		t.Fatalf("watch's first line %q, want the holder", l)
	}
	if e := js.event(t); e.Event != "held" || e.Token != uint64(tok) {
		t.Fatalf("watch --json's first line %+v, want the holder", e)
	}
	if l := text.next(t); !strings.Contains(l, "expired") || !strings.Contains(l, `(was owner="pod-a" token=`+tok.String()) {
		t.Fatalf("watch after the TTL: %q, want expired", l)
	}
	if e := js.event(t); e.Event != "expired" || e.Previous == nil || e.Previous.Owner != "pod-a" || e.State != "free" {
		t.Fatalf("watch --json after the TTL: %+v, want expired", e)
	}
	text.interrupt(t)
	js.interrupt(t)
}

func TestWatchHandOffValkey(t *testing.T) {
	t.Parallel()
	store, conn := valkeyStore(t)
	watchHandOff(t, store, conn)
}

func TestWatchHandOffPostgres(t *testing.T) {
	t.Parallel()
	store, conn := postgresStore(t)
	watchHandOff(t, store, conn)
}

// watchHandOff follows a key through a preferred candidate, a hand-off to
// that candidate, its acquisition and its expiry, with watch (text and
// JSON), inspect and list.
func watchHandOff(t *testing.T, store lease.Backend, conn []string) {
	if _, ok := store.(lease.HandOffer); !ok {
		t.Skipf("%T does not implement lease.HandOffer yet", store)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctl := func(args ...string) result { return run(t, nil, append(slices.Clone(conn), args...)...) }
	newClient := func(owner string) *lease.Client {
		c, err := lease.NewClient(store, lease.ClientOptions{Owner: owner, SweepEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	long, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h, err := newClient("pod-a").TryAcquire(ctx, "reports", long)
	if err != nil {
		t.Fatal(err)
	}
	args := append(slices.Clone(conn), "watch", "--interval", "1h", "reports")
	text := startWatch(t, nil, args...)
	js := startWatch(t, nil, append(args, "--json")...)
	text.until(t, "held")
	js.until(t, `"event":"held"`)

	// pod-b waits as the preferred candidate.
	_, err = store.Acquire(ctx, lease.AcquireRequest{Key: "reports", Owner: "pod-b", Nonce: unique("n"), TTL: time.Minute, Preferred: true})
	if !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("pod-b's acquire of a held key: %v, want ErrNotAcquired", err)
	}
	if l := text.next(t); !strings.Contains(l, "preferred") || !strings.Contains(l, `preferred="pod-b"`) || !strings.Contains(l, `owner="pod-a"`) {
		t.Fatalf("watch after pod-b asked to be preferred: %q", l)
	}
	if e := js.event(t); e.Event != "preferred" || e.Preferred != "pod-b" || e.Owner != "pod-a" {
		t.Fatalf("watch --json after pod-b asked to be preferred: %+v", e)
	}
	r := ctl("inspect", "reports")
	r.want(t, 0, "PREFERRED", "pod-b")

	// pod-a hands the key off to pod-b: the offered token is above its own.
	if err := h.HandOff(ctx, lease.Offer{Candidates: []string{"pod-b"}, Window: 50 * time.Second}); err != nil {
		t.Fatal(err)
	}
	rec, err := store.Inspect(ctx, "reports")
	if err != nil {
		t.Fatal(err)
	}
	offered := rec.Token
	if offered <= h.Token() || !slices.Equal(rec.Candidates, []string{"pod-b"}) {
		t.Fatalf("the record after the hand-off: %+v, want an offer to pod-b above token %d", rec, h.Token())
	}
	l := text.next(t)
	for _, s := range []string{"handed-off", "token=" + offered.String(), `offered to "pod-b"`, `by owner="pod-a"`, "was token=" + h.Token().String()} {
		if !strings.Contains(l, s) {
			t.Fatalf("watch after the hand-off: %q lacks %q", l, s)
		}
	}
	if e := js.event(t); e.Event != "handed_off" || e.State != "offered" || e.Token != uint64(offered) ||
		!slices.Equal(e.Candidates, []string{"pod-b"}) || e.OfferedBy != "pod-a" || e.RemainingMS <= 0 {
		t.Fatalf("watch --json after the hand-off: %+v", e)
	}
	ctl("inspect", "reports").want(t, 0, "offered", "CANDIDATES", "pod-b", "ENDED", "handed-off", offered.String())
	got := decode[watchEvent](t, ctl("inspect", "--json", "reports"))
	if got.State != "offered" || !slices.Equal(got.Candidates, []string{"pod-b"}) || got.OfferedBy != "pod-a" || got.Ended != "handed_off" || got.Token != uint64(offered) {
		t.Fatalf("inspect --json of the offer: %+v", got)
	}
	ctl("list").want(t, 0, "reports", "offered", "pod-b")

	// pod-b takes the offered token, and holds it for a second only.
	short, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hb, err := newClient("pod-b").TryAcquire(ctx, "reports", short)
	if err != nil {
		t.Fatal(err)
	}
	if hb.Token() != offered {
		t.Fatalf("pod-b's token %d, want the offered %d", hb.Token(), offered)
	}
	if l := text.next(t); !strings.Contains(l, "acquired") || !strings.Contains(l, `owner="pod-b" token=`+offered.String()) {
		t.Fatalf("watch after pod-b acquired: %q", l)
	}
	if e := js.event(t); e.Event != "acquired" || e.Owner != "pod-b" || e.Token != uint64(offered) || e.Preferred != "" {
		t.Fatalf("watch --json after pod-b acquired: %+v", e)
	}
	if l := text.next(t); !strings.Contains(l, "expired") || !strings.Contains(l, `(was owner="pod-b" token=`+offered.String()) {
		t.Fatalf("watch after pod-b's TTL: %q", l)
	}
	if e := js.event(t); e.Event != "expired" || e.Ended != "expired" {
		t.Fatalf("watch --json after pod-b's TTL: %+v", e)
	}
	ctl("inspect", "reports").want(t, 0, "free", "ENDED", "expired")
	text.interrupt(t)
	js.interrupt(t)
}
