package fence_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/testserver"
	"github.com/golib/lease/internal/valkeyacl"
)

// TestDocumentedValkeyACLIsEnough runs fenced writes with every command of
// the allow-list, a refused stale write and a refused wrong-type write as
// a user with exactly the rule docs/fencing.md gives, checks that the rule
// refuses what would reach other tenants' data, and that the docs give it.
func TestDocumentedValkeyACLIsEnough(t *testing.T) {
	text, err := os.ReadFile("../docs/fencing.md")
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
	v, err := fence.NewValkey(c, fence.ValkeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	k := func(name string) string { return "data:" + name + ":{jobs/7}" }
	if _, err := v.Do(ctx, snap("jobs", 2), "jobs/7",
		fence.Set(k("status"), "running", fence.SetOptions{TTL: 90 * time.Second}),
		fence.Set(k("px"), "v", fence.SetOptions{TTL: 1500 * time.Millisecond, NX: true}),
		fence.HSet(k("job"), "state", "done"),
		fence.IncrBy(k("count"), 41),
		fence.Expire(k("job"), time.Hour),
		fence.Expire(k("count"), 2500*time.Millisecond),
		fence.XAdd(k("events"), fence.XAddOptions{MaxLen: 100, Approx: true}, "event", "done"),
		fence.Del(k("px")),
	); err != nil {
		t.Fatalf("Do as the ACL user: %v", err)
	}
	// Commands on keys that exist now: the script checks them first.
	if _, err := v.Do(ctx, snap("jobs", 2), "jobs/7",
		fence.XAdd(k("events"), fence.XAddOptions{}, "event", "again"),
		fence.IncrBy(k("count"), 0),
		fence.Set(k("status"), "done", fence.SetOptions{XX: true, KeepTTL: true}),
	); err != nil {
		t.Fatalf("Do as the ACL user: %v", err)
	}
	if err := v.Claim(ctx, snap("jobs", 3), "jobs/7"); err != nil {
		t.Fatalf("Claim as the ACL user: %v", err)
	}
	if _, err := v.Do(ctx, snap("jobs", 2), "jobs/7", fence.Set(k("status"), "late", fence.SetOptions{})); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale Do as the ACL user = %v; want fence.ErrStale", err)
	}
	// The script checks types before writing; the check is allowed too.
	if _, err := v.Do(ctx, snap("jobs", 3), "jobs/7", fence.HSet(k("status"), "f", "v")); err == nil || valkeyacl.Refused(err) {
		t.Fatalf("HSET on a string as the ACL user = %v; want the script's refusal, not a permission error", err)
	}
	// After the server forgot the script (a restart, a failover), the call
	// falls back to EVAL.
	if err := admin.Do(ctx, admin.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Do(ctx, snap("jobs", 3), "jobs/7", fence.IncrBy(k("count"), 1)); err != nil {
		t.Fatalf("Do as the ACL user after SCRIPT FLUSH: %v", err)
	}
	valkeyacl.CheckAllUsed(t, admin, valkeyacl.Fence)
	if n, err := admin.Do(ctx, admin.B().Get().Key(k("count")).Build()).AsInt64(); err != nil || n != 42 {
		t.Fatalf("count = %d, %v; want 42", n, err)
	}
}
