package leasequeue_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/testkit/valkeyacl"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasequeue/partition"
)

// TestDocumentedValkeyACLIsEnough runs every operation of the Valkey
// source, the Valkey roster and a Group on them, with leases on the Valkey
// lease backend, as a user with exactly the rule the documentation gives;
// checks that the rule refuses what would reach other tenants' data; and
// that the documentation gives it.
func TestDocumentedValkeyACLIsEnough(t *testing.T) {
	for _, doc := range []string{"doc.go", "../docs/queues.md", "../SECURITY.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(text)), " "), "ACL SETUSER workers "+valkeyacl.Queue) {
			t.Errorf("%s does not give the rule ACL SETUSER workers %s", doc, valkeyacl.Queue)
		}
	}
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	admin := valkeyClient(t, []string{srv.Addr()})
	c := valkeyacl.Login(t, admin, srv.Addr(), "workers", valkeyacl.Queue)
	defer valkeyacl.CheckForbidden(t, admin, c, "other:{orders/1}")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := leasevalkey.New(c, leasevalkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := backend.Check(ctx); err != nil {
		t.Fatalf("Store.Check as the ACL user: %v", err)
	}
	src, err := leasequeue.NewValkeySource(c, "orders", leasequeue.ValkeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustEnqueue(ctx, t, src, "a", "b", "c", "d")
	policy := loadedPolicy(t, 5*time.Second)
	q, err := leasequeue.New(newClient(t, backend, "w", nil), src, leasequeue.Options{Name: "orders", Policy: policy, MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(id string) *leasequeue.Claim {
		t.Helper()
		cl, err := q.Claim(ctx, id)
		if err != nil {
			t.Fatalf("Claim(%q) as the ACL user: %v", id, err)
		}
		return cl
	}
	if err := claim("a").Complete(ctx); err != nil {
		t.Fatalf("Complete as the ACL user: %v", err)
	}
	// An INCRBY of an existing key: the fence script reads it (GET).
	if err := admin.Do(ctx, admin.B().Set().Key(src.ItemKey("b", "receipts")).Value("1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := src.CompleteClaimWith(ctx, claim("b"), fencevalkey.IncrBy(src.ItemKey("b", "receipts"), 1)); err != nil {
		t.Fatalf("CompleteClaimWith as the ACL user: %v", err)
	}
	if err := claim("c").Fail(ctx, errors.New("try again")); err != nil {
		t.Fatalf("Fail as the ACL user: %v", err)
	}
	if err := claim("c").Fail(ctx, errors.New("for good")); err != nil { // the second of MaxAttempts: dead
		t.Fatalf("second Fail as the ACL user: %v", err)
	}
	if err := claim("d").Release(ctx); err != nil {
		t.Fatalf("Release as the ACL user: %v", err)
	}
	for id, want := range map[string]leasequeue.State{"a": leasequeue.Done, "b": leasequeue.Done, "c": leasequeue.Dead} {
		if it := mustItem(ctx, t, src, id); it.State != want {
			t.Errorf("item %s = %+v; want %s", id, it, want)
		}
	}
	// Sweep finds nothing past its retention yet, then removes the
	// finished items (DEL is allowed).
	if page, err := src.Sweep(ctx, lease.SweepOptions{Limit: 10}); err != nil || len(page.Removed) != 0 {
		t.Fatalf("Sweep as the ACL user = %+v, %v; want nothing removed", page, err)
	}
	short, err := leasequeue.NewValkeySource(c, "orders", leasequeue.ValkeyOptions{DoneRetention: time.Nanosecond, DeadRetention: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if got := sweepAll(ctx, t, short, lease.SweepOptions{Limit: 10}); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Sweep as the ACL user removed %q; want a, b and c", got)
	}
	// The finished items' ready times are gone (HDEL is allowed); the
	// released item keeps its own.
	if ready, err := admin.Do(ctx, admin.B().Hkeys().Key(src.SinceKey()).Build()).AsStrSlice(); err != nil || !slices.Equal(ready, []string{"d"}) {
		t.Errorf("ready times kept for %q, %v; want d's only", ready, err)
	}
	// After the server forgot the scripts (a restart, a failover), the
	// calls fall back to EVAL and EVAL_RO.
	if err := admin.Do(ctx, admin.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := backend.Check(ctx); err != nil {
		t.Fatalf("Store.Check as the ACL user after SCRIPT FLUSH: %v", err)
	}
	mustEnqueue(ctx, t, src, "e")
	// Ready: e, and d, whose claim was released.
	cs, err := q.ClaimNext(ctx, 10)
	if err != nil || len(cs) != 2 {
		t.Fatalf("ClaimNext as the ACL user after SCRIPT FLUSH = %d claims, %v; want d and e", len(cs), err)
	}
	for _, c := range cs {
		if err := c.Complete(ctx); err != nil {
			t.Fatalf("Complete of %s as the ACL user after SCRIPT FLUSH: %v", c.ID(), err)
		}
	}

	roster, err := partition.NewValkeyRoster(c, leasequeue.ValkeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := partition.New(newClient(t, backend, "w", nil), partition.Options{Name: "shards", Partitions: []string{"p"}, Policy: policy, Roster: roster})
	if err != nil {
		t.Fatal(err)
	}
	// The membership of a previous run is still held: Run waits for its
	// release, woken by the release channel.
	old, err := newClient(t, backend, "w-before", nil).TryAcquire(ctx, memberKey("shards", "w"), policy)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- g.Run(runCtx, func(ctx context.Context, p partition.Owned) error { <-ctx.Done(); return nil })
	}()
	eventually(t, 30*time.Second, "Run watches the release channel", func() bool {
		n, err := admin.Do(ctx, admin.B().PubsubShardnumsub().Channel(backend.RecordKey(memberKey("shards", "w"))+":released").Build()).ToArray()
		if err != nil || len(n) != 2 {
			return false
		}
		sub, _ := n[1].AsInt64()
		return sub > 0
	})
	if err := old.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "w owns the partition", func() bool { return len(g.Owned()) == 1 })
	if m, err := roster.Members(ctx, "shards"); err != nil || len(m) != 1 {
		t.Errorf("Members as the ACL user = %q, %v", m, err)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Group.Run as the ACL user: %v", err)
	}
	valkeyacl.CheckAllUsed(t, admin, valkeyacl.Queue)
}
