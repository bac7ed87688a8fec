package fencevalkey_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/testkit/valkeyacl"
)

// TestDocumentedValkeyACLIsEnough runs fenced writes with every command of
// the allow-list, a refused stale write and a refused wrong-type write as
// a user with exactly the rule docs/fencing.md gives, checks that the rule
// refuses what would reach other tenants' data, and that the docs give it.
func TestDocumentedValkeyACLIsEnough(t *testing.T) {
	text, err := os.ReadFile("../../docs/fencing.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(text)), " "), "ACL SETUSER fences "+valkeyacl.Fence) {
		t.Errorf("docs/fencing.md does not give the rule ACL SETUSER fences %s", valkeyacl.Fence)
	}
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	admin := newValkey(t, srv.Addr())
	c := valkeyacl.Login(t, admin, srv.Addr(), "fences", valkeyacl.Fence)
	defer valkeyacl.CheckForbidden(t, admin, c, "other:{jobs/7}")
	v, err := fencevalkey.New(c, fencevalkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	k := func(name string) string { return "data:" + name + ":{jobs/7}" }
	if _, err := v.Do(ctx, snap("jobs", 2), "jobs/7",
		fencevalkey.Set(k("status"), "running", fencevalkey.SetOptions{TTL: 90 * time.Second}),
		fencevalkey.Set(k("px"), "v", fencevalkey.SetOptions{TTL: 1500 * time.Millisecond, NX: true}),
		fencevalkey.HSet(k("job"), "state", "done"),
		fencevalkey.IncrBy(k("count"), 41),
		fencevalkey.Expire(k("job"), time.Hour),
		fencevalkey.Expire(k("count"), 2500*time.Millisecond),
		fencevalkey.XAdd(k("events"), fencevalkey.XAddOptions{MaxLen: 100, Approx: true}, "event", "done"),
		fencevalkey.Del(k("px")),
	); err != nil {
		t.Fatalf("Do as the ACL user: %v", err)
	}
	// Commands on keys that exist now: the script checks them first.
	if _, err := v.Do(ctx, snap("jobs", 2), "jobs/7",
		fencevalkey.XAdd(k("events"), fencevalkey.XAddOptions{}, "event", "again"),
		fencevalkey.IncrBy(k("count"), 0),
		fencevalkey.Set(k("status"), "done", fencevalkey.SetOptions{XX: true, KeepTTL: true}),
	); err != nil {
		t.Fatalf("Do as the ACL user: %v", err)
	}
	if err := v.Claim(ctx, snap("jobs", 3), "jobs/7"); err != nil {
		t.Fatalf("Claim as the ACL user: %v", err)
	}
	if _, err := v.Do(ctx, snap("jobs", 2), "jobs/7", fencevalkey.Set(k("status"), "late", fencevalkey.SetOptions{})); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale Do as the ACL user = %v; want fence.ErrStale", err)
	}
	// The script checks types before writing; the check is allowed too.
	if _, err := v.Do(ctx, snap("jobs", 3), "jobs/7", fencevalkey.HSet(k("status"), "f", "v")); err == nil || valkeyacl.Refused(err) {
		t.Fatalf("HSET on a string as the ACL user = %v; want the script's refusal, not a permission error", err)
	}
	// After the server forgot the script (a restart, a failover), the call
	// falls back to EVAL.
	if err := admin.Do(ctx, admin.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Do(ctx, snap("jobs", 3), "jobs/7", fencevalkey.IncrBy(k("count"), 1)); err != nil {
		t.Fatalf("Do as the ACL user after SCRIPT FLUSH: %v", err)
	}
	valkeyacl.CheckAllUsed(t, admin, valkeyacl.Fence)
	if n, err := admin.Do(ctx, admin.B().Get().Key(k("count")).Build()).AsInt64(); err != nil || n != 42 {
		t.Fatalf("count = %d, %v; want 42", n, err)
	}
}
