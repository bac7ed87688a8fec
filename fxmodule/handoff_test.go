package fxmodule_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/fx"

	leasefx "github.com/golib/lease/fxmodule"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseservice"
)

// TestStopHandsOffToSuccessor: on stop, the lease of a function run with
// Go is handed off to a successor waiting for it, which gets it at once
// with a higher token, and the hand-off is logged; Leases.Observe
// reports the term and the hand-off.
func TestStopHandsOffToSuccessor(t *testing.T) {
	cfg := leasefx.Config{Owner: "test/a", Backend: leasefx.Memory, Policy: testPolicy}
	logger, recorded := logs()
	var (
		leases  *leasefx.Leases
		backend lease.Backend
	)
	elected := make(chan lease.Token, 1)
	a := app(t, cfg, logger,
		fx.Populate(&leases, &backend),
		fx.Invoke(func(l *leasefx.Leases) error {
			_, err := l.Go("singleton", func(ctx context.Context, h *lease.Handle) error {
				elected <- h.Token()
				<-ctx.Done()
				return nil
			}, leasefx.RunOptions{Service: leaseservice.Options{Successors: []string{"test/a", "test/b"}}})
			return err
		}))
	a.RequireStart()
	token := within(t, elected, "the function to start")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	observed := make(chan lease.Observation, 16)
	observing := make(chan struct{})
	go func() {
		defer close(observing)
		for o, err := range leases.Observe(ctx, "singleton") {
			if err != nil {
				continue
			}
			select {
			case observed <- o:
			case <-ctx.Done():
			}
		}
	}()
	if o := within(t, observed, "the first observation"); !o.Held || o.Owner != "test/a" || o.Token != token {
		t.Fatalf("first observation %+v, want held by test/a with token %d", o, token)
	}

	b, err := lease.NewClient(backend, lease.ClientOptions{Owner: "test/b"})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lease.Handle, 1)
	go func() {
		h, err := b.Acquire(ctx, leases.Key("singleton"), leases.Policy())
		if err != nil {
			t.Errorf("successor's Acquire = %v", err)
		}
		got <- h
	}()
	if err := a.Stop(ctxT(t)); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	h := within(t, got, "the successor's lease")
	if h == nil || h.Token() <= token {
		t.Fatalf("successor's handle %v, want a token above %d", h, token)
	}
	defer h.Release(context.WithoutCancel(ctx))
	if n := recorded.FilterMessage("lease handed off").Len(); n != 1 {
		t.Errorf("%d \"lease handed off\" lines, want 1: %v", n, recorded.All())
	}
	// The offer stands only until the successor asks, so an observer may
	// see the successor's term without the hand-off before it.
	for {
		o := within(t, observed, "the successor's term")
		if o.Change == lease.ChangeHandedOff && (len(o.Candidates) != 1 || o.Candidates[0] != "test/b") {
			t.Errorf("hand-off observed to %v, want [test/b]", o.Candidates)
		}
		if o.Held {
			if o.Owner != "test/b" || o.Token != h.Token() {
				t.Errorf("observed %+v, want held by test/b with token %d", o, h.Token())
			}
			break
		}
	}
	cancel()
	<-observing
}
