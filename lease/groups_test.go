package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

// groupFixture is a client on a memory store, which implements both
// PermitAcquirer and SetAcquirer, with a fake clock and a recorder.
func groupFixture(t *testing.T) (*memory.Store, *lease.Client, *recorder, lease.Policy) {
	t.Helper()
	clock := leasetest.NewFakeClock(epoch)
	store := memory.New(memory.Options{Clock: clock})
	obs := &recorder{}
	c, err := lease.NewClient(store, lease.ClientOptions{Owner: "test", Clock: clock, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return store, c, obs, p
}

// TestGroupsNeedTheCapability: a backend without PermitAcquirer or
// SetAcquirer is refused before any I/O, with an error that names its
// type and matches errors.ErrUnsupported and lease.ErrMisconfigured.
func TestGroupsNeedTheCapability(t *testing.T) {
	f := newFixture(t) // f.b wraps the store and has neither capability
	ctx := context.Background()
	_, err := f.c.TryAcquirePermit(ctx, "jobs", 3, f.p)
	if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, lease.ErrMisconfigured) || !strings.Contains(err.Error(), "*lease_test.faulty does not implement lease.PermitAcquirer") {
		t.Fatalf("TryAcquirePermit on a backend without the capability = %v, want ErrUnsupported naming the backend type", err)
	}
	if want := `lease: acquire permit "jobs": unsupported operation: backend *lease_test.faulty does not implement lease.PermitAcquirer (semaphores)`; err.Error() != want {
		t.Fatalf("error text %q, want %q", err, want)
	}
	_, err = f.c.AcquireSet(ctx, []string{"b", "a"}, f.p)
	if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, lease.ErrMisconfigured) || !strings.Contains(err.Error(), `acquire set "a,b"`) || !strings.Contains(err.Error(), "*lease_test.faulty does not implement lease.SetAcquirer") {
		t.Fatalf("AcquireSet on a backend without the capability = %v, want ErrUnsupported naming the backend type", err)
	}
	if n := f.obs.count(func(lease.Event) bool { return true }); n != 0 {
		t.Fatalf("%d events for calls refused before any I/O, want none", n)
	}
}

func TestPermitArgumentsRefused(t *testing.T) {
	_, c, _, p := groupFixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		key     string
		permits int
		want    string
		is      error
	}{
		{"jobs", 0, `lease: acquire permit "jobs": 0 permits, out of the range 1 to MaxPermits (256)`, nil},
		{"jobs", lease.MaxPermits + 1, `lease: acquire permit "jobs": 257 permits, out of the range 1 to MaxPermits (256)`, nil},
		{"", 2, `lease: acquire permit: invalid key: empty`, lease.ErrInvalidKey},
		{strings.Repeat("k", lease.MaxKeyLen-5), 2, "would be too long", lease.ErrInvalidKey},
	} {
		_, err := c.AcquirePermit(ctx, tc.key, tc.permits, p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("AcquirePermit(%.20q, %d) = %v, want %q (matching %v)", tc.key, tc.permits, err, tc.want, tc.is)
		}
	}
	// The longest key whose permit keys are valid is accepted.
	if _, err := c.TryAcquirePermit(ctx, strings.Repeat("k", lease.MaxKeyLen-len("/permit/0")), 1, p); err != nil {
		t.Fatalf("TryAcquirePermit of a key whose permit keys fit: %v", err)
	}
}

func TestSetArgumentsRefused(t *testing.T) {
	_, c, _, p := groupFixture(t)
	ctx := context.Background()
	many := make([]string, lease.MaxSetKeys+1)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	for _, tc := range []struct {
		keys []string
		want string
	}{
		{nil, `lease: acquire set: invalid key: no key`},
		{[]string{"a", "b\nc"}, `lease: acquire set: invalid key "b\nc": control character U+000A at byte 1`},
		{many, `lease: acquire set: invalid key: 65 keys, more than MaxSetKeys (64)`},
	} {
		_, err := c.AcquireSet(ctx, tc.keys, p)
		if !errors.Is(err, lease.ErrInvalidKey) || err.Error() != tc.want {
			t.Errorf("AcquireSet(%q) = %v, want %q", tc.keys, err, tc.want)
		}
	}
	// Duplicates count once: MaxSetKeys distinct keys given twice each.
	twice := append(many[:lease.MaxSetKeys:lease.MaxSetKeys], many[:lease.MaxSetKeys]...)
	h, err := c.TryAcquireSet(ctx, twice, p)
	if err != nil {
		t.Fatalf("TryAcquireSet of %d keys, each twice: %v", lease.MaxSetKeys, err)
	}
	if n := len(h.Keys()); n != lease.MaxSetKeys {
		t.Fatalf("the handle holds %d keys, want %d", n, lease.MaxSetKeys)
	}
	h.Keys()[0] = "changed"
	if h.Keys()[0] == "changed" {
		t.Fatal("Keys() returned the handle's own slice")
	}
}

// TestPermitErrorsAndEvents: a refused permit says that every permit is
// held and who holds the one that ends first; events name the permit key
// on success and the semaphore on failure.
func TestPermitErrorsAndEvents(t *testing.T) {
	store, c, obs, p := groupFixture(t)
	ctx := context.Background()
	other, _ := lease.NewClient(store, lease.ClientOptions{Owner: "other", Clock: c.Clock()})
	h, err := other.TryAcquirePermit(ctx, "jobs", 2, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquirePermit(ctx, "jobs", 2, p); err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquirePermit(ctx, "jobs", 2, p)
	want := `lease: acquire permit "jobs": all 2 permits are held; the first to end is held by "other" (token 1) for another 30s`
	if err == nil || err.Error() != want {
		t.Fatalf("TryAcquirePermit = %v, want %q", err, want)
	}
	var na *lease.NotAcquiredError
	if !errors.As(err, &na) || na.Key != "jobs" || na.Holder != "other" || !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("TryAcquirePermit = %v, want a *NotAcquiredError naming the holder", err)
	}
	_, err = c.TryAcquirePermit(ctx, "jobs", 1, p)
	if want := `lease: acquire permit "jobs": its one permit is held by "other" (token 1) for another 30s`; err == nil || err.Error() != want {
		t.Fatalf("TryAcquirePermit of one permit = %v, want %q", err, want)
	}
	if failed := obs.lastAcquireFailed(); failed == nil || failed.Key != "jobs" {
		t.Fatalf("AcquireFailed = %+v, want it to name the semaphore", failed)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mine, err := c.TryAcquirePermit(ctx, "jobs", 2, p)
	if err != nil {
		t.Fatal(err)
	}
	if n := obs.count(func(e lease.Event) bool {
		a, ok := e.(*lease.Acquired)
		return ok && a.Key == "jobs/permit/0" && a.Token == mine.Token()
	}); n != 1 {
		t.Fatalf("%d Acquired events naming the permit key, want 1", n)
	}
}

// TestSetErrorsName: a set's errors name the set once and the key of it
// that they are about.
func TestSetErrorsName(t *testing.T) {
	store, c, _, p := groupFixture(t)
	ctx := context.Background()
	other, _ := lease.NewClient(store, lease.ClientOptions{Owner: "other", Clock: c.Clock()})
	if _, err := other.TryAcquire(ctx, "b", p); err != nil {
		t.Fatal(err)
	}
	_, err := c.TryAcquireSet(ctx, []string{"c", "b", "a"}, p)
	if want := `lease: acquire set "a,b,c": key "b": held by "other" (token 1) for another 30s`; err == nil || err.Error() != want {
		t.Fatalf("TryAcquireSet = %v, want %q", err, want)
	}
	h, err := c.TryAcquireSet(ctx, []string{"x", "y"}, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.ForceRelease(ctx, "y", 0); err != nil {
		t.Fatal(err)
	}
	err = h.Validate(ctx)
	if want := `lease: validate "x,y": key "y": token 1 lost: expired`; err == nil || err.Error() != want {
		t.Fatalf("Validate = %v, want %q", err, want)
	}
	_, err = h.StartManaged(ctx)
	if want := `lease: manage "x,y": key "y": token 1 lost: expired`; err == nil || err.Error() != want {
		t.Fatalf("StartManaged = %v, want %q", err, want)
	}
	_, err = h.SnapshotFor("z")
	if want := `lease: snapshot "x,y": invalid key: "z" is not a key of this handle, which holds "x,y"`; err == nil || err.Error() != want {
		t.Fatalf("SnapshotFor = %v, want %q", err, want)
	}
}

// cleanupRecorder records the contexts of the releases a client makes
// after a permit attempt whose reply it lost.
type cleanupRecorder struct {
	*memory.Store
	mu   sync.Mutex
	ctxs []context.Context
	keys []string
}

func (b *cleanupRecorder) AcquirePermit(ctx context.Context, r lease.AcquireRequest, permits int) (int, lease.Token, error) {
	if _, _, err := b.Store.AcquirePermit(ctx, r, permits); err != nil {
		return 0, 0, err
	}
	return 0, 0, lease.Indeterminate(context.DeadlineExceeded)
}

func (b *cleanupRecorder) Release(ctx context.Context, a lease.Acquisition) error {
	b.mu.Lock()
	b.ctxs, b.keys = append(b.ctxs, ctx), append(b.keys, a.Key)
	b.mu.Unlock()
	if a.Token != 0 {
		return errors.New("the clean-up release names a token")
	}
	return b.Store.Release(ctx, a)
}

// TestPermitCleanupUnderOneContext: after an unanswered attempt, the
// client releases every permit below the number asked for, by secret
// alone, under one context bounded by OperationTimeout.
func TestPermitCleanupUnderOneContext(t *testing.T) {
	b := &cleanupRecorder{Store: memory.New(memory.Options{})}
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = c.TryAcquirePermit(ctx, "jobs", 4, p)
	if !errors.Is(err, lease.ErrIndeterminate) || !strings.Contains(err.Error(), "the clean-up release ended what an attempt had granted") {
		t.Fatalf("TryAcquirePermit = %v, want ErrIndeterminate after a clean-up that ended the grant", err)
	}
	if want := "jobs/permit/0 jobs/permit/1 jobs/permit/2 jobs/permit/3"; strings.Join(b.keys, " ") != want {
		t.Fatalf("clean-up released %q, want %q", b.keys, want)
	}
	for _, rctx := range b.ctxs {
		if rctx != b.ctxs[0] {
			t.Fatal("the clean-up releases ran under several contexts, want one")
		}
	}
	if d, ok := b.ctxs[0].Deadline(); !ok || time.Until(d) > p.Options().OperationTimeout {
		t.Fatalf("the clean-up context's deadline is %v (%v), want within OperationTimeout", d, ok)
	}
	if r, _ := b.Inspect(ctx, "jobs/permit/0"); r.Held {
		t.Fatalf("permit 0 still held after the clean-up: %+v", r)
	}
}

// TestGroupEventsSayWhatTheyAreAbout: every event of a permit names its
// semaphore, and every event of a set its keys, so that an observer can
// label them without parsing Key; a lease's events carry neither.
func TestGroupEventsSayWhatTheyAreAbout(t *testing.T) {
	store, c, obs, p := groupFixture(t)
	ctx := context.Background()
	permit, err := c.TryAcquirePermit(ctx, "jobs", 1, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquirePermit(ctx, "jobs", 1, p); err == nil {
		t.Fatal("a second permit of one was granted")
	}
	set, err := c.TryAcquireSet(ctx, []string{"b", "a"}, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquireSet(ctx, []string{"c", "a"}, p); err == nil {
		t.Fatal("an overlapping set was granted")
	}
	plain, err := c.TryAcquire(ctx, "plain", p)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*lease.Handle{permit, set, plain} {
		if err := h.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	m, err := set.StartManaged(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.ForceRelease(ctx, "b", 0); err != nil {
		t.Fatal(err)
	}
	if err := set.Renew(ctx); err == nil {
		t.Fatal("a set with a force-released key renewed")
	}
	for _, h := range []*lease.Handle{permit, set, plain} {
		h.Release(ctx)
	}
	m.Stop(ctx)
	kinds := map[string]int{}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for _, e := range obs.events {
		i := e.Info()
		kind := fmt.Sprintf("%T", e)
		switch {
		case i.Key == "jobs" || i.Key == "jobs/permit/0":
			if i.Semaphore != "jobs" || i.Keys != nil {
				t.Errorf("%s of a permit: Semaphore %q, Keys %q; want jobs and none", kind, i.Semaphore, i.Keys)
			}
			kinds["permit "+kind]++
		case strings.Contains(i.Key, ","):
			if i.Semaphore != "" || strings.Join(i.Keys, ",") != i.Key {
				t.Errorf("%s of set %q: Semaphore %q, Keys %q; want none and the set's keys", kind, i.Key, i.Semaphore, i.Keys)
			}
			kinds["set "+kind]++
		default:
			if i.Semaphore != "" || i.Keys != nil {
				t.Errorf("%s of lease %q: Semaphore %q, Keys %q; want neither", kind, i.Key, i.Semaphore, i.Keys)
			}
		}
	}
	for _, want := range []string{
		"permit *lease.Acquired", "permit *lease.AcquireFailed", "permit *lease.Renewed", "permit *lease.Released",
		"set *lease.Acquired", "set *lease.AcquireFailed", "set *lease.Renewed", "set *lease.RenewFailed", "set *lease.ReleaseFailed",
	} {
		if kinds[want] == 0 {
			t.Errorf("no %s event recorded; got %v", want, kinds)
		}
	}
}

// TestParsePermitKey: ParsePermitKey reads what PermitKey writes, and
// nothing else.
func TestParsePermitKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		sem  string
		slot int
		ok   bool
	}{
		{"jobs/permit/0", "jobs", 0, true},
		{"a/permit/b/permit/255", "a/permit/b", 255, true},
		{"{acct}/permit/17", "{acct}", 17, true},
		{"jobs/permit/256", "", 0, false}, // MaxPermits and above
		{"jobs/permit/01", "", 0, false},  // not as PermitKey writes it
		{"jobs/permit/-1", "", 0, false},
		{"jobs/permit/+1", "", 0, false},
		{"jobs/permit/", "", 0, false},
		{"/permit/3", "", 0, false}, // no semaphore
		{"jobs/permit/3/x", "", 0, false},
		{"jobs", "", 0, false},
	} {
		sem, slot, ok := lease.ParsePermitKey(tc.key)
		if sem != tc.sem || slot != tc.slot || ok != tc.ok {
			t.Errorf("ParsePermitKey(%q) = %q, %d, %v; want %q, %d, %v", tc.key, sem, slot, ok, tc.sem, tc.slot, tc.ok)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		sem := rapid.StringMatching(`[a-z/{}0-9]{1,12}(/permit/[0-9]{1,3})?`).Draw(t, "semaphore")
		slot := rapid.IntRange(0, lease.MaxPermits-1).Draw(t, "slot")
		if s, n, ok := lease.ParsePermitKey(lease.PermitKey(sem, slot)); !ok || s != sem || n != slot {
			t.Fatalf("ParsePermitKey(PermitKey(%q, %d)) = %q, %d, %v", sem, slot, s, n, ok)
		}
		key := rapid.StringMatching(`[a-z]{0,3}(/permit/)?[0-9+-]{0,4}`).Draw(t, "key")
		if s, n, ok := lease.ParsePermitKey(key); ok && lease.PermitKey(s, n) != key {
			t.Fatalf("ParsePermitKey(%q) = %q, %d: PermitKey gives %q", key, s, n, lease.PermitKey(s, n))
		}
	})
}
