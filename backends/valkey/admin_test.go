package valkey_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/testkit/testserver"
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
	_, _, err := s.List(ctx, "", "", 10)
	if err == nil || !strings.Contains(err.Error(), "may not run ROLE") || !strings.Contains(err.Error(), `add "+scan +role" to its ACL rule`) ||
		strings.Contains(err.Error(), "lease scripts need") {
		t.Fatalf("List with the documented rule = %v, want a ROLE permission error that names the grant", err)
	}
	if _, err := s.Sweep(ctx, lease.SweepOptions{Limit: 10}); err == nil || !strings.Contains(err.Error(), `add "+scan +role +del"`) {
		t.Fatalf("Sweep with the documented rule = %v, want a ROLE permission error that names the grant", err)
	}
	if prev, err := s.ForceRelease(ctx, a.Key, a.Token); err != nil || !prev.Held {
		t.Fatalf("ForceRelease with the documented rule = %+v, %v", prev, err)
	}
	noScan, _, _ := aclStore(t, "leases", aclRule+" +role")
	acquire(t, noScan, "acl/listed", "o", time.Minute)
	if _, _, err := noScan.List(ctx, "", "", 10); err == nil || !strings.Contains(err.Error(), "may not run SCAN") {
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

// TestListLimitBoundsThePage lists many keys in pages of one and two on a
// server of its own, where SCAN with a small COUNT often returns more
// names than asked for (a hash bucket's keys come back together): no page
// may hold more records than limit, and the pages together hold every key.
func TestListLimitBoundsThePage(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	c := newClient(t, srv.Addr())
	s := newStore(t, c)
	const n = 400
	cmds := make(valkey.Commands, 0, n)
	for i := range n {
		cmds = append(cmds, c.B().Set().Key(fmt.Sprintf("filler:%d", i)).Value("x").Build())
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		acquire(t, s, fmt.Sprintf("job/%03d", i), "o", time.Minute)
	}
	for _, limit := range []int{1, 2} {
		seen := map[string]bool{}
		over := 0
		for cursor, pages := "", 0; pages == 0 || cursor != ""; pages++ {
			if pages > 100*n {
				t.Fatalf("limit %d: the listing did not end after %d pages", limit, pages)
			}
			recs, next, err := s.List(ctx, "job/", cursor, limit)
			if err != nil {
				t.Fatalf("List(limit %d, cursor %q): %v", limit, cursor, err)
			}
			if len(recs) > limit {
				over++
			}
			for _, r := range recs {
				seen[r.Key] = true
			}
			cursor = next
		}
		if over > 0 {
			t.Errorf("limit %d: %d pages held more than %d records", limit, over, limit)
		}
		if len(seen) != n {
			t.Errorf("limit %d: the pages held %d distinct keys, want %d", limit, len(seen), n)
		}
	}
}

// TestListReadsEveryLayout lists keys of every record layout (plain,
// holding a hash tag, permits of a semaphore, and a semaphore's token
// key, which is no lease) under key prefixes that cut them anywhere, on a
// standalone server and on a cluster: each listing holds exactly the
// leases whose keys start with its prefix.
func TestListReadsEveryLayout(t *testing.T) {
	t.Parallel()
	keys := []string{
		"plain", "pl{}ain", "{acct}/17", "{acct}/42", "x{acct}", "{acct}", "sem/permit/0", "sem/permit/12",
		"sem/permit/03", "sem/permitx", "{t}sem/permit/1", "sem{/permit/1", "semaphore",
	}
	prefixes := []string{"", "p", "{", "{acct}", "{acct}/", "{acct}/4", "x{", "sem", "sem/permit/", "sem/permit/1", "{t}", "zzz"}
	for _, topo := range []struct {
		name   string
		client func(testing.TB) valkey.Client
	}{{"standalone", standalone}, {"cluster", cluster}} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			s := newStore(t, topo.client(t))
			for _, k := range keys {
				acquire(t, s, k, "o", time.Minute)
			}
			// A permit granted through AcquirePermit leaves the semaphore's
			// token key, which List must pass over.
			if _, _, err := s.AcquirePermit(ctx, lease.AcquireRequest{Key: "sem", Owner: "o", Nonce: "n", TTL: time.Minute}, 2); err != nil {
				t.Fatal(err)
			}
			keys := append(keys, "sem/permit/1")
			for _, p := range prefixes {
				var got []string
				for cursor, pages := "", 0; pages == 0 || cursor != ""; pages++ {
					recs, next, err := s.List(ctx, p, cursor, 3)
					if err != nil || pages > 1000 {
						t.Fatalf("List(%q): %v (page %d)", p, err, pages)
					}
					for _, r := range recs {
						got = append(got, r.Key)
					}
					cursor = next
				}
				var want []string
				for _, k := range keys {
					if strings.HasPrefix(k, p) {
						want = append(want, k)
					}
				}
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("List(%q) = %q, want %q", p, got, want)
				}
			}
		})
	}
}
