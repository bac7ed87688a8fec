package leasetest

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/lease"
)

// Suite configures RunBackendSuite.
type Suite struct {
	// NewBackend returns the backend under test. It is called once per
	// subtest and may return the same backend every time: every subtest
	// uses keys of its own. Required.
	NewBackend func(t *testing.T) lease.Backend

	// Clock is the FakeClock that the backend's expiry runs on, if the
	// backend accepts one; the suite then advances it instead of sleeping,
	// and runs subtests one at a time. Nil means the backend expires leases
	// on real time, and subtests run in parallel.
	Clock *FakeClock

	// TTL is the lease TTL of subtests that wait for expiry on real time.
	// Default 1s. Raise it for a backend with slow round trips.
	TTL time.Duration

	// NewRetentionBackend, if not nil, returns a backend that is a
	// lease.Sweeper with a retention of Retention, for the Sweeper
	// subtests. Its records must be apart from those of NewBackend's
	// backend (another prefix or table): its sweeps remove every record
	// past that short retention. On real time, a Retention of a second or
	// two leaves room for the subtests' round trips.
	NewRetentionBackend func(t *testing.T) lease.Backend
	Retention           time.Duration

	// Reconnect, if not nil, breaks every connection of the backend under
	// test to its server, those of its notifications included, and
	// returns; the backend must reconnect by itself. The Observe subtests
	// use it to check that no final state is missed across a
	// reconnection.
	Reconnect func(t *testing.T)
}

// RunBackendSuite runs the conformance suite against the backend that
// s.NewBackend returns. Each rule is a subtest; see the package
// documentation.
func RunBackendSuite(t *testing.T, s Suite) {
	t.Helper()
	if s.NewBackend == nil {
		t.Fatal("leasetest: Suite.NewBackend is nil")
	}
	if s.TTL == 0 {
		s.TTL = time.Second
	}
	if s.Clock != nil {
		s.TTL = longTTL // virtual time costs nothing
	}
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			// Sweeper subtests run one at a time: each sweep walks the
			// whole retention backend.
			if s.Clock == nil && !strings.HasPrefix(c.name, "Sweeper/") {
				t.Parallel()
			}
			e := &env{t: t, s: s, b: s.NewBackend(t)}
			c.run(e)
		})
	}
}

// longTTL is the TTL of subtests that do not wait for expiry.
const longTTL = 30 * time.Second

type testCase struct {
	name string
	run  func(e *env)
}

func cases() []testCase {
	var all []testCase
	all = append(all, acquireCases()...)
	all = append(all, renewCases()...)
	all = append(all, releaseCases()...)
	all = append(all, tokenCases()...)
	all = append(all, expiryCases()...)
	all = append(all, watchCases()...)
	all = append(all, standbyCases()...)
	all = append(all, managedCases()...)
	all = append(all, adminCases()...)
	all = append(all, semaphoreCases()...)
	all = append(all, setCases()...)
	all = append(all, historyCases()...)
	all = append(all, sweepCases()...)
	all = append(all, handOffCases()...)
	all = append(all, observeCases()...)
	return all
}

// env is one subtest's view of the backend.
type env struct {
	t *testing.T
	s Suite
	b lease.Backend
	// tag and tagged make the keys of setKeys: a hash tag of the
	// subtest's own, and how many keys it made.
	tag    string
	tagged int
}

// key returns a key unique to this subtest.
func (e *env) key(suffix string) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(e.t.Name())
	return "leasetest/" + name + "/" + rand.Text()[:8] + "/" + suffix
}

// nonce returns a fresh acquisition secret.
func (e *env) nonce() string { return rand.Text() }

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *env) clock() lease.Clock {
	if e.s.Clock != nil {
		return e.s.Clock
	}
	return lease.SystemClock()
}

func (e *env) client(owner string) *lease.Client {
	return e.clientOn(e.b, owner, e.clock())
}

func (e *env) clientOn(b lease.Backend, owner string, clock lease.Clock) *lease.Client {
	e.t.Helper()
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: owner, Clock: clock})
	if err != nil {
		e.t.Fatalf("NewClient: %v", err)
	}
	return c
}

// policy returns a policy with a long TTL and no waiting.
func (e *env) policy() lease.Policy { return e.policyWith(lease.PolicyOptions{}) }

func (e *env) policyWith(o lease.PolicyOptions) lease.Policy {
	e.t.Helper()
	if o.TTL == 0 {
		o.TTL = longTTL
	}
	p, err := lease.NewPolicy(o)
	if err != nil {
		e.t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

// expire lets d plus a little pass on the backend's clock.
func (e *env) expire(d time.Duration) {
	if e.s.Clock != nil {
		e.s.Clock.Advance(d + time.Millisecond)
		return
	}
	time.Sleep(d + 50*time.Millisecond)
}

// wait lets d pass on the backend's clock.
func (e *env) wait(d time.Duration) {
	if e.s.Clock != nil {
		e.s.Clock.Advance(d)
		return
	}
	time.Sleep(d)
}

// acquire acquires key directly on the backend with a long TTL.
func (e *env) acquire(key, owner string) lease.Acquisition {
	e.t.Helper()
	return e.acquireTTL(key, owner, longTTL)
}

// acquireShort acquires key directly on the backend with the suite's TTL,
// for subtests that wait for expiry.
func (e *env) acquireShort(key, owner string) lease.Acquisition {
	e.t.Helper()
	return e.acquireTTL(key, owner, e.s.TTL)
}

func (e *env) acquireTTL(key, owner string, ttl time.Duration) lease.Acquisition {
	e.t.Helper()
	nonce := e.nonce()
	tok, err := e.b.Acquire(e.ctx(), lease.AcquireRequest{Key: key, Owner: owner, Nonce: nonce, TTL: ttl})
	if err != nil {
		e.t.Fatalf("Acquire(%q): %v", key, err)
	}
	if tok == 0 {
		e.t.Fatalf("Acquire(%q) granted token 0", key)
	}
	return lease.Acquisition{Key: key, Owner: owner, Nonce: nonce, Token: tok}
}

func (e *env) inspect(key string) lease.Record {
	e.t.Helper()
	r, err := e.b.Inspect(e.ctx(), key)
	if err != nil {
		e.t.Fatalf("Inspect(%q): %v", key, err)
	}
	return r
}

// mustHold fails unless the record of a.Key shows a as holder.
func (e *env) mustHold(a lease.Acquisition) {
	e.t.Helper()
	r := e.inspect(a.Key)
	if !r.Held || r.Token != a.Token || r.Owner != a.Owner {
		e.t.Fatalf("Inspect(%q) = %+v, want held by %q with token %d", a.Key, r, a.Owner, a.Token)
	}
}

// mustBeFree fails if key is held.
// holdThenRelease renews h, validates it, runs and stops a managed
// renewer on it and releases it, failing e's test at the first error: what
// every kind of handle (a lease, a permit, a set) must support.
func (e *env) holdThenRelease(h *lease.Handle) {
	e.t.Helper()
	if err := h.Renew(e.ctx()); err != nil {
		e.t.Fatalf("Renew: %v", err)
	}
	if err := h.Validate(e.ctx()); err != nil {
		e.t.Fatalf("Validate: %v", err)
	}
	m, err := h.StartManaged(e.ctx())
	if err != nil {
		e.t.Fatal(err)
	}
	if err := m.Stop(e.ctx()); err != nil {
		e.t.Fatalf("Stop: %v", err)
	}
	if err := h.Release(e.ctx()); err != nil {
		e.t.Fatalf("Release: %v", err)
	}
}

func (e *env) mustBeFree(key string) {
	e.t.Helper()
	if r := e.inspect(key); r.Held {
		e.t.Fatalf("Inspect(%q) = %+v, want free", key, r)
	}
}

// mustLose fails unless err is a *lease.LostError with the reason.
func (e *env) mustLose(what string, err error, reason lease.LostReason) {
	e.t.Helper()
	var le *lease.LostError
	if !errors.As(err, &le) || !errors.Is(err, lease.ErrLost) {
		e.t.Fatalf("%s: got %v, want a *lease.LostError (%v)", what, err, reason)
	}
	if le.Reason != reason {
		e.t.Fatalf("%s: got reason %v (%v), want %v", what, le.Reason, err, reason)
	}
}
