package valkey_test

import (
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/lease"
)

// TestListACL checks what the documentation says List and ForceRelease
// need: List needs +scan and +role on top of the documented rule,
// ForceRelease nothing more.
func TestListACL(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, _, _ := aclStore(t, "leases", aclRule)
	a := acquire(t, s, "acl/listed", "o", time.Minute)
	if _, _, err := s.List(ctx, "", "", 10); err == nil || !strings.Contains(err.Error(), "ROLE") {
		t.Fatalf("List with the documented rule = %v, want a ROLE permission error", err)
	}
	if prev, err := s.ForceRelease(ctx, a.Key, a.Token); err != nil || !prev.Held {
		t.Fatalf("ForceRelease with the documented rule = %+v, %v", prev, err)
	}
	noScan, _, _ := aclStore(t, "leases", aclRule+" +role")
	acquire(t, noScan, "acl/listed", "o", time.Minute)
	if _, _, err := noScan.List(ctx, "", "", 10); err == nil || !strings.Contains(err.Error(), "SCAN") {
		t.Fatalf("List without +scan = %v, want a SCAN permission error", err)
	}
	op, _, _ := aclStore(t, "leases", aclRule+" +scan +role")
	b := acquire(t, op, "acl/listed", "o", time.Minute)
	var all []lease.Record
	for cursor, pages := "", 0; pages == 0 || cursor != ""; pages++ {
		recs, next, err := op.List(ctx, "acl/", cursor, 10)
		if err != nil || pages > 1000 {
			t.Fatalf("List with +scan +role: %v (page %d)", err, pages)
		}
		all, cursor = append(all, recs...), next
	}
	if len(all) != 1 || all[0].Token != b.Token {
		t.Fatalf("List with +scan +role = %+v; want the one lease", all)
	}
}
