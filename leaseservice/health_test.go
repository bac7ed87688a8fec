package leaseservice_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseservice"
)

// TestCheckReportsARunThatIsNotCampaigning: before Run and after it
// returned, the replica does not campaign, and Check says so.
func TestCheckReportsARunThatIsNotCampaigning(t *testing.T) {
	mem := leasememory.New(leasememory.Options{})
	elected := make(chan struct{})
	s, err := leaseservice.New(client(t, mem, "svc"), "k", policy(t, time.Second),
		func(ctx context.Context, h *lease.Handle) error { close(elected); <-ctx.Done(); return nil },
		leaseservice.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err == nil || !strings.Contains(err.Error(), "Run has not been called") {
		t.Fatalf("Check before Run = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-elected
	if err := s.Check(); err != nil {
		t.Fatalf("Check while leading = %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err == nil || err.Error() != `leaseservice: "k": not campaigning: Run returned` {
		t.Fatalf("Check after Run returned = %v", err)
	}
}

// TestCheckReportsAFunctionThatOutlivesItsLease: renewals stop (the fake
// clock jumps past the local deadline), the function's context is
// cancelled, but the function ignores it: once the deadline is more than
// HealthGrace behind, Check reports it; when the function finally
// returns, the service campaigns again and is healthy.
func TestCheckReportsAFunctionThatOutlivesItsLease(t *testing.T) {
	clock, _, c := fakeWorld(t, "svc")
	p := policy(t, 12*time.Second) // local deadline 10s after the grant
	stuck := make(chan struct{})
	causes := make(chan error, 1)
	transitions := make(chan leaseservice.Transition, 16)
	calls := 0
	s, err := leaseservice.New(c, "k", p, func(ctx context.Context, h *lease.Handle) error {
		if calls++; calls == 1 {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			<-stuck // ignores its context
			return nil
		}
		<-ctx.Done()
		return nil
	}, leaseservice.Options{HealthGrace: 5 * time.Second, OnTransition: func(tr leaseservice.Transition) { transitions <- tr }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	if tr := next(t, transitions); tr.Kind != leaseservice.Elected {
		t.Fatalf("%+v, want Elected", tr)
	}
	deadline := s.Handle().Deadline()
	if err := clock.WaitForTimers(ctx, 1); err != nil { // the renewer's
		t.Fatal(err)
	}
	clock.Set(deadline.Add(time.Second)) // the renewer wakes past the deadline
	if cause := <-causes; !errors.Is(cause, lease.ErrLost) {
		t.Fatalf("function's context cause = %v, want ErrLost", cause)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("Check 1s past the deadline, within HealthGrace = %v", err)
	}
	clock.Set(deadline.Add(5*time.Second + time.Millisecond))
	err = s.Check()
	if err == nil || !strings.Contains(err.Error(), `leaseservice: "k": token `) || !strings.Contains(err.Error(), "local deadline passed 5.001s ago and the function has not returned") {
		t.Fatalf("Check past HealthGrace = %v", err)
	}
	close(stuck)
	for tr := next(t, transitions); tr.Kind != leaseservice.Elected; tr = next(t, transitions) {
	}
	if err := s.Check(); err != nil {
		t.Fatalf("Check in the next term = %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// hangingAcquire is a backend whose Acquire does not return until told,
// whatever its context says.
type hangingAcquire struct {
	lease.Backend
	entered chan struct{}
	unblock chan struct{}
}

func (b *hangingAcquire) Acquire(ctx context.Context, r lease.AcquireRequest) (lease.Token, error) {
	b.entered <- struct{}{}
	<-b.unblock
	return 0, errors.New("connection reset")
}

// TestCheckReportsAStuckCampaign: an acquire attempt that does not return
// (a backend call deaf to its context) is reported once it is HealthGrace
// past its bound, OperationTimeout.
func TestCheckReportsAStuckCampaign(t *testing.T) {
	clock, mem, _ := fakeWorld(t, "svc")
	b := &hangingAcquire{Backend: mem, entered: make(chan struct{}, 1), unblock: make(chan struct{})}
	hc, err := lease.NewClient(b, lease.ClientOptions{Owner: "svc", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second, OperationTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s, err := leaseservice.New(hc, "k", p, func(ctx context.Context, h *lease.Handle) error { return nil },
		leaseservice.Options{HealthGrace: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-b.entered
	clock.Advance(time.Second + 3*time.Second) // OperationTimeout + HealthGrace
	if err := s.Check(); err != nil {
		t.Fatalf("Check at the bound plus HealthGrace = %v", err)
	}
	clock.Advance(time.Millisecond)
	if err := s.Check(); err == nil || !strings.Contains(err.Error(), `leaseservice: "k": campaign stuck: an acquire attempt began 4.001s ago, 3.001s past its bound`) {
		t.Fatalf("Check past the bound = %v", err)
	}
	cancel()
	close(b.unblock)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestHealthHandler(t *testing.T) {
	healthy := func() error { return nil }
	sick := func() error { return errors.New(`leaseservice: "k": not campaigning: Run returned`) }
	for _, c := range []struct {
		checks []func() error
		code   int
		body   string
	}{
		{nil, http.StatusOK, "ok\n"},
		{[]func() error{healthy, healthy}, http.StatusOK, "ok\n"},
		{[]func() error{healthy, sick}, http.StatusServiceUnavailable, `leaseservice: "k": not campaigning: Run returned` + "\n"},
	} {
		srv := httptest.NewServer(leaseservice.HealthHandler(c.checks...))
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != c.code || string(body) != c.body {
			t.Errorf("%d checks: %d %q, want %d %q", len(c.checks), resp.StatusCode, body, c.code, c.body)
		}
	}
}
