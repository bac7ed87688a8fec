package fencevalkey_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/fenceenv"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/testkit/valkeyacl"
	"github.com/golib/lease/lease"
)

// newRetiringFence returns a Valkey fence on c with a prefix of its own
// and a retention of an hour.
func newRetiringFence(t *testing.T, c valkey.Client, retention time.Duration) *fencevalkey.Fence {
	t.Helper()
	v, err := fencevalkey.New(c, fencevalkey.Options{Prefix: fenceenv.Prefix(), Retention: retention})
	if err != nil {
		t.Fatalf("NewValkey: %v", err)
	}
	return v
}

// ageFences makes the fences of resources look as if they last advanced
// long ago.
func ageFences(t *testing.T, c valkey.Client, v *fencevalkey.Fence, resources ...string) {
	t.Helper()
	for _, r := range resources {
		if err := c.Do(t.Context(), c.B().Hset().Key(v.FenceKey(r)).FieldValue().FieldValue("at", "1").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// sameSlot returns a resource other than r, named after base, whose fence
// key is in the hash slot of r's.
func sameSlot(v *fencevalkey.Fence, r, base string) string {
	slot := fencevalkey.KeySlot(v.FenceKey(r))
	for i := 0; ; i++ {
		if o := fmt.Sprint(base, i); o != r && fencevalkey.KeySlot(v.FenceKey(o)) == slot {
			return o
		}
	}
}

// otherSlot returns a resource named after base whose fence key is not in
// the hash slot of r's.
func otherSlot(v *fencevalkey.Fence, r, base string) string {
	slot := fencevalkey.KeySlot(v.FenceKey(r))
	for i := 0; ; i++ {
		if o := fmt.Sprint(base, i); fencevalkey.KeySlot(v.FenceKey(o)) != slot {
			return o
		}
	}
}

// hfield reads field of hash key, "" if none.
func hfield(t *testing.T, c valkey.Client, key, field string) string {
	t.Helper()
	s, err := c.Do(t.Context(), c.B().Hget().Key(key).Field(field).Build()).ToString()
	if err != nil && !valkey.IsValkeyNil(err) {
		t.Fatal(err)
	}
	return s
}

// TestValkeyRetire: fence keys past the retention retire, raising the
// floor of their lease key in their hash slot; the floor then refuses the
// lease's stale writers in that slot, on the retired resources and on
// fresh ones, and admits the current holder; a retired resource can be
// fenced by another lease key.
func TestValkeyRetire(t *testing.T) {
	t.Parallel()
	valkeyClients(t, func(t *testing.T, c valkey.Client) {
		v := newRetiringFence(t, c, time.Hour)
		ctx := ctxT(t)
		claim := func(key string, tok lease.Token, r string) {
			t.Helper()
			if err := v.Claim(ctx, snap(key, tok), r); err != nil {
				t.Fatalf("Claim(%s, %d, %s): %v", key, tok, r, err)
			}
		}
		a := "a"
		b := sameSlot(v, a, "b")
		cc := otherSlot(v, a, "c")
		fresh := sameSlot(v, a, "fresh")
		claim("k", 5, a)
		claim("k", 7, b)
		claim("k", 3, cc)
		claim("other", 3, "d")
		claim("k", 9, "young")
		if at := hfield(t, c, v.FenceKey("young"), "at"); len(at) < 16 {
			t.Fatalf("fence key records at = %q; want the server's clock in microseconds", at)
		}
		ageFences(t, c, v, a, b, cc, "d")
		want := []string{a, b, cc, "d"}
		slices.Sort(want)

		due := walk(t, v, 3, true)
		slices.Sort(due)
		if !slices.Equal(due, want) {
			t.Fatalf("dry run lists %q; want %q", due, want)
		}
		if hfield(t, c, v.FenceKey(a), "token") != "5" {
			t.Fatal("the dry run retired a fence")
		}
		removed := walk(t, v, 3, false)
		slices.Sort(removed)
		if !slices.Equal(removed, want) {
			t.Fatalf("Sweep removed %q; want %q", removed, want)
		}
		for _, r := range want {
			if n, _ := c.Do(ctx, c.B().Exists().Key(v.FenceKey(r)).Build()).AsInt64(); n != 0 {
				t.Fatalf("the fence key of retired %s remains", r)
			}
		}
		if got := hfield(t, c, v.FloorKey(a, "k"), "token"); got != "7" {
			t.Fatalf("floor of k in the slot of a and b = %q; want 7", got)
		}
		if got := hfield(t, c, v.FloorKey(cc, "k"), "token"); got != "3" {
			t.Fatalf("floor of k in the slot of c = %q; want 3", got)
		}
		if v.FloorKey(a, "k") != v.FloorKey(b, "k") || v.FloorKey(a, "k") == v.FloorKey(cc, "k") {
			t.Fatal("floor keys are not one per hash slot")
		}
		if again := walk(t, v, 10, false); len(again) != 0 {
			t.Fatalf("a second sweep removed %q", again)
		}

		wantFloor(t, v.Claim(ctx, snap("k", 6), a), 6, 7)
		wantFloor(t, v.Claim(ctx, snap("k", 6), fresh), 6, 7)
		wantFloor(t, v.Claim(ctx, snap("k", 2), cc), 2, 3)
		wantFloor(t, v.Claim(ctx, snap("other", 2), "d"), 2, 3)
		if n, _ := c.Do(ctx, c.B().Exists().Key(v.FenceKey(fresh)).Build()).AsInt64(); n != 0 {
			t.Fatal("a refused write left a fence key")
		}
		// A data write refused by the floor writes nothing either.
		data := dataKey(v, "data", a)
		if _, err := v.Do(ctx, snap("k", 6), a, fencevalkey.Set(data, "late", fencevalkey.SetOptions{})); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("stale Do = %v", err)
		}
		if n, _ := c.Do(ctx, c.B().Exists().Key(data).Build()).AsInt64(); n != 0 {
			t.Fatal("a write refused by the floor was applied")
		}
		// The holder of token 7 is admitted, and so is a token of k in
		// another slot above that slot's floor: its resources never saw 7.
		claim("k", 7, a)
		claim("k", 7, fresh)
		claim("k", 4, cc)
		// A retired resource can be fenced by another lease key.
		claim("third", 1, "d")
		var fe *fence.ForeignLeaseError
		if err := v.Claim(ctx, snap("other", 5), "d"); !errors.As(err, &fe) || fe.FencedBy != "third" {
			t.Fatalf("Claim of d under other = %v; want ForeignLeaseError by third", err)
		}
		// Floor keys and their slot, as the server sees it.
		if fencevalkey.KeySlot(v.FloorKey(a, "k")) != fencevalkey.KeySlot(v.FenceKey(a)) {
			t.Fatal("the floor key is not in the fence key's slot")
		}
		if ttl, _ := c.Do(ctx, c.B().Pttl().Key(v.FloorKey(a, "k")).Build()).AsInt64(); ttl != -1 {
			t.Fatalf("floor key PTTL = %d; want -1", ttl)
		}
	})
}

// TestValkeyRetireLegacyKey: a fence key written before fences retired
// has no field "at"; a sweep starts its clock instead of retiring it (a
// dry run does not), and it retires once the retention has passed since.
func TestValkeyRetireLegacyKey(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	ctx := ctxT(t)
	v := newRetiringFence(t, c, 50*time.Millisecond)
	fk := v.FenceKey("legacy")
	if err := c.Do(ctx, c.B().Hset().Key(fk).FieldValue().FieldValue("key", "k").FieldValue("token", "5").FieldValue("owner", "o").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got := walk(t, v, 10, true); len(got) != 0 || hfield(t, c, fk, "at") != "" {
		t.Fatalf("dry run on a legacy key: %q, at %q; want nothing listed or written", got, hfield(t, c, fk, "at"))
	}
	before := time.Now()
	if got := walk(t, v, 10, false); len(got) != 0 {
		t.Fatalf("Sweep retired the legacy key %q at once", got)
	}
	at, err := strconv.ParseInt(hfield(t, c, fk, "at"), 10, 64)
	if err != nil || time.UnixMicro(at).Before(before.Add(-time.Minute)) {
		t.Fatalf("legacy key at = %d, %v; want about now", at, err)
	}
	time.Sleep(100 * time.Millisecond)
	if got := walk(t, v, 10, false); !slices.Equal(got, []string{"legacy"}) {
		t.Fatalf("Sweep after the retention removed %q; want legacy", got)
	}
	wantFloor(t, v.Claim(ctx, snap("k", 4), "legacy"), 4, 5)
}

// TestValkeyRetentionOptions: KeepForever retires nothing; a negative
// retention is invalid.
func TestValkeyRetentionOptions(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	v := newRetiringFence(t, c, lease.KeepForever)
	if err := v.Claim(t.Context(), snap("k", 5), "r"); err != nil {
		t.Fatal(err)
	}
	ageFences(t, c, v, "r")
	for _, dry := range []bool{true, false} {
		if got := walk(t, v, 10, dry); len(got) != 0 {
			t.Fatalf("KeepForever (dry run %v) removed %q", dry, got)
		}
	}
	if _, err := fencevalkey.New(c, fencevalkey.Options{Retention: -3}); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("NewValkey with a negative retention = %v; want ErrInvalid", err)
	}
	if _, err := v.Sweep(t.Context(), lease.SweepOptions{}); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Sweep with limit 0 = %v; want ErrInvalid", err)
	}
}

// TestValkeyFloorKeyIsNoDataKey: no fenced write can touch a floor key,
// of its own lease or another's, in its slot.
func TestValkeyFloorKeyIsNoDataKey(t *testing.T) {
	t.Parallel()
	v := newFence(t, standalone(t))
	ctx := ctxT(t)
	for _, key := range []string{v.FloorKey("a", "k"), v.FloorKey("a", "other"), v.FloorKey("a", "with/slash{and}braces%")} {
		for _, cmd := range []fencevalkey.Command{fencevalkey.Del(key), fencevalkey.HSet(key, "token", "1"), fencevalkey.Set(key, "x", fencevalkey.SetOptions{})} {
			_, err := v.Do(ctx, snap("k", 1), "a", cmd)
			if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "floor key") {
				t.Errorf("%s = %v; want ErrInvalid naming the floor key", cmd, err)
			}
		}
	}
	// Floor key names escape the lease key: one per lease key, whatever
	// bytes it holds.
	if k1, k2 := v.FloorKey("a", "x/y"), v.FloorKey("a", "x%2Fy"); k1 == k2 {
		t.Fatalf("two lease keys share the floor key %q", k1)
	}
}

// TestSlotTags: every hash slot has a tag in that slot, the server agrees,
// and the table has not changed: floors are stored under these names.
func TestSlotTags(t *testing.T) {
	t.Parallel()
	tags := make([]string, 16384)
	for s := range tags {
		tags[s] = fencevalkey.SlotTag(uint16(s))
		if got := fencevalkey.KeySlot(tags[s]); int(got) != s || len(tags[s]) > 3 || strings.ContainsAny(tags[s], "{}") {
			t.Fatalf("slot %d has tag %q, in slot %d", s, tags[s], got)
		}
	}
	const golden = "44ffa25a3e5c33a0e3a74460f9042f0d6e89921ce861d5c17a7558f089471c0a"
	if sum := fmt.Sprintf("%x", sha256.Sum256([]byte(strings.Join(tags, "\n")))); sum != golden {
		t.Fatalf("the slot tags changed (sha256 %s, was %s): floors written under the old names would be lost", sum, golden)
	}
	c := cluster(t)
	cmds := make(valkey.Commands, len(tags))
	for s, tag := range tags {
		cmds[s] = c.B().ClusterKeyslot().Key("x{" + tag + "}:floor:k").Build()
	}
	for s, res := range c.DoMulti(t.Context(), cmds...) {
		if got, err := res.AsInt64(); err != nil || got != int64(s) {
			t.Fatalf("CLUSTER KEYSLOT of the floor key of slot %d = %d, %v", s, got, err)
		}
	}
}

// TestValkeySweepACL: a user with the documented fence rule can sweep once
// it is also granted SCAN and ROLE, as docs/fencing.md says, and not
// without.
func TestValkeySweepACL(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	admin := newValkey(t, srv.Addr())
	ctx := ctxT(t)
	sweep := func(rule string) ([]string, error) {
		c := valkeyacl.Login(t, admin, srv.Addr(), "fences", rule)
		v, err := fencevalkey.New(c, fencevalkey.Options{Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Claim(ctx, snap("k", 5), "jobs/7"); err != nil {
			t.Fatalf("Claim as the ACL user: %v", err)
		}
		if err := admin.Do(ctx, admin.B().Hset().Key(v.FenceKey("jobs/7")).FieldValue().FieldValue("at", "1").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		page, err := v.Sweep(ctx, lease.SweepOptions{Limit: 100})
		return page.Removed, err
	}
	if _, err := sweep(valkeyacl.Fence); err == nil || !strings.Contains(err.Error(), "ROLE") {
		t.Fatalf("Sweep with the fence rule alone = %v; want a ROLE permission error", err)
	}
	if _, err := sweep(valkeyacl.Fence + " +role"); err == nil || !strings.Contains(err.Error(), "SCAN") {
		t.Fatalf("Sweep without +scan = %v; want a SCAN permission error", err)
	}
	removed, err := sweep(valkeyacl.Fence + " " + valkeyacl.FenceSweep)
	if err != nil || !slices.Equal(removed, []string{"jobs/7"}) {
		t.Fatalf("Sweep with %s = %q, %v; want jobs/7 retired", valkeyacl.FenceSweep, removed, err)
	}
}
