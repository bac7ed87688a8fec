package lease_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
)

func TestHandOffValidatesTheOffer(t *testing.T) {
	ctx := context.Background()
	c, err := lease.NewClient(memory.New(memory.Options{}), lease.ClientOptions{Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, lease.MaxCandidates+1)
	for i := range many {
		many[i] = fmt.Sprint("c", i)
	}
	for _, tc := range []struct {
		name string
		o    lease.Offer
		want string
	}{
		{"none", lease.Offer{}, "at least one candidate"},
		{"too many", lease.Offer{Candidates: many}, "more than the limit of 16"},
		{"bad owner", lease.Offer{Candidates: []string{"ok", "a\nb"}}, "candidate"},
		{"window too long", lease.Offer{Candidates: []string{"b"}, Window: time.Minute}, "longer than the policy TTL"},
		{"window too short", lease.Offer{Candidates: []string{"b"}, Window: time.Microsecond}, "at least 1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := c.TryAcquire(ctx, "k/"+tc.name, p)
			if err != nil {
				t.Fatal(err)
			}
			err = h.HandOff(ctx, tc.o)
			if !errors.Is(err, lease.ErrInvalidOffer) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), `lease: hand off "k/`+tc.name+`": `) {
				t.Fatalf("HandOff = %v, want ErrInvalidOffer saying %q", err, tc.want)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatalf("Release after a refused offer: %v (the handle must stay usable)", err)
			}
		})
	}
}

// plain hides every optional capability of a backend.
type plain struct{ b lease.Backend }

func (p plain) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	return p.b.Acquire(ctx, r)
}
func (p plain) Renew(ctx context.Context, a lease.Acquisition, ttl time.Duration) error {
	return p.b.Renew(ctx, a, ttl)
}
func (p plain) Release(ctx context.Context, a lease.Acquisition) error { return p.b.Release(ctx, a) }
func (p plain) Inspect(ctx context.Context, key string) (lease.Record, error) {
	return p.b.Inspect(ctx, key)
}

func TestHandOffUnsupported(t *testing.T) {
	ctx := context.Background()
	store := memory.New(memory.Options{})
	p, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	c, _ := lease.NewClient(plain{store}, lease.ClientOptions{Owner: "a"})
	h, err := c.TryAcquire(ctx, "k", p)
	if err != nil {
		t.Fatal(err)
	}
	err = h.HandOff(ctx, lease.Offer{Candidates: []string{"b"}})
	if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, lease.ErrMisconfigured) || !strings.Contains(err.Error(), "does not implement lease.HandOffer") {
		t.Fatalf("HandOff on a backend without the capability = %v, want ErrUnsupported naming lease.HandOffer", err)
	}
	c2, _ := lease.NewClient(store, lease.ClientOptions{Owner: "a"})
	ph, err := c2.TryAcquirePermit(ctx, "sem", 2, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := ph.HandOff(ctx, lease.Offer{Candidates: []string{"b"}}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("HandOff of a permit = %v, want ErrUnsupported", err)
	}
}

// flaky fails Inspect while fail is set.
type flaky struct {
	plain
	fail  atomic.Pointer[error]
	reads atomic.Int64
}

func (f *flaky) Inspect(ctx context.Context, key string) (lease.Record, error) {
	f.reads.Add(1)
	if p := f.fail.Load(); p != nil {
		return lease.Record{}, *p
	}
	return f.plain.Inspect(ctx, key)
}

// TestObservePollsWithoutWatcher: without a ChangeWatcher, Observe sees a
// change by its poll; a failed read is yielded and the sequence goes on; a
// configuration error ends it.
func TestObservePollsWithoutWatcher(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := &flaky{plain: plain{memory.New(memory.Options{})}}
	c, _ := lease.NewClient(b, lease.ClientOptions{Owner: "observer"})
	holder, _ := lease.NewClient(b, lease.ClientOptions{Owner: "holder"})
	p, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	next, stop := iter.Pull2(c.Observe(ctx, "k", lease.ObserveOptions{Poll: 10 * time.Millisecond}))
	defer stop()
	o, err, _ := next()
	if err != nil || o.Change != lease.ChangeInitial || o.Held {
		t.Fatalf("first = %+v, %v; want the initial free state", o, err)
	}
	h, err := holder.TryAcquire(ctx, "k", p)
	if err != nil {
		t.Fatal(err)
	}
	if o, err, _ = next(); err != nil || o.Change != lease.ChangeAcquired || o.Owner != "holder" || o.Token != h.Token() {
		t.Fatalf("second = %v %+v, %v; want acquired by holder", o.Change, o.Record, err)
	}
	boom := errors.New("connection refused")
	b.fail.Store(&boom)
	if _, err, _ = next(); !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), `lease: observe "k": `) {
		t.Fatalf("after a failed read = %v, want it wrapped as observe \"k\"", err)
	}
	b.fail.Store(nil)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if o, err, _ = next(); err != nil || o.Change != lease.ChangeReleased || o.Held {
		t.Fatalf("after the release = %v %+v, %v; want released", o.Change, o.Record, err)
	}
	bad := lease.Misconfigured(errors.New("NOPERM"))
	b.fail.Store(&bad)
	if _, err, ok := next(); !ok || !errors.Is(err, lease.ErrMisconfigured) {
		t.Fatalf("after a misconfigured read = %v, %v; want the error", err, ok)
	}
	if _, _, ok := next(); ok {
		t.Fatal("the sequence went on after a configuration error")
	}
}

func TestObserveInvalidKey(t *testing.T) {
	c, _ := lease.NewClient(memory.New(memory.Options{}), lease.ClientOptions{Owner: "o"})
	n := 0
	for _, err := range c.Observe(context.Background(), "", lease.ObserveOptions{}) {
		n++
		if !errors.Is(err, lease.ErrInvalidKey) {
			t.Fatalf("Observe of an empty key yielded %v, want ErrInvalidKey", err)
		}
	}
	if n != 1 {
		t.Fatalf("Observe of an empty key yielded %d times, want once", n)
	}
}

// TestObserveEndsWithContext: the sequence ends, without an error, when
// ctx ends, even while it waits for a change.
func TestObserveEndsWithContext(t *testing.T) {
	c, _ := lease.NewClient(memory.New(memory.Options{}), lease.ClientOptions{Owner: "o"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	for _, err := range c.Observe(ctx, "k", lease.ObserveOptions{Poll: time.Hour}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		cancel()
	}
	if n != 1 {
		t.Fatalf("got %d observations, want the initial one", n)
	}
}

func TestChangeAndEndingStrings(t *testing.T) {
	for c, want := range map[lease.Change]string{lease.ChangeInitial: "initial", lease.ChangeHandedOff: "handed off", lease.ChangeRecordLost: "record lost", lease.Change(99): "Change(99)"} {
		if c.String() != want {
			t.Errorf("Change %d = %q, want %q", c, c.String(), want)
		}
	}
	for e, want := range map[lease.Ending]string{lease.EndUnknown: "unknown", lease.EndForceReleased: "force-released", lease.EndHandedOff: "handed off", lease.Ending(9): "Ending(9)"} {
		if e.String() != want {
			t.Errorf("Ending %d = %q, want %q", e, e.String(), want)
		}
	}
	if lease.HandedOff.String() != "handed off" {
		t.Errorf("HandedOff = %q", lease.HandedOff.String())
	}
	err := (&lease.NotAcquiredError{Key: "k", Token: 7, Remaining: 1500 * time.Millisecond, Candidates: []string{"b", "c"}}).Error()
	if want := `lease: "k" is offered to "b", "c" (token 7) for another 1.5s`; err != want {
		t.Errorf("NotAcquiredError = %q, want %q", err, want)
	}
}
