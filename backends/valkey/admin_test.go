package valkey_test

import (
	"strings"
	"testing"
	"time"
)

// TestListACL checks the documentation's claim that List needs +role on top
// of the documented rule, and ForceRelease nothing more.
func TestListACL(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	without := aclStore(t, "leases", aclRule)
	a := acquire(t, without, "acl/listed", "o", time.Minute)
	if _, _, err := without.List(ctx, "", "", 10); err == nil || !strings.Contains(err.Error(), "ROLE") {
		t.Fatalf("List without +role = %v, want a ROLE permission error", err)
	}
	if prev, err := without.ForceRelease(ctx, a.Key, a.Token); err != nil || !prev.Held {
		t.Fatalf("ForceRelease with the documented rule = %+v, %v", prev, err)
	}
	with := aclStore(t, "leases", aclRule+" +role")
	b := acquire(t, with, "acl/listed", "o", time.Minute)
	recs, _, err := with.List(ctx, "acl/", "", 10)
	if err != nil || len(recs) != 1 || recs[0].Token != b.Token {
		t.Fatalf("List with +role = %+v, %v; want the one lease", recs, err)
	}
}
