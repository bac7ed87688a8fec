package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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
