package leasequeue_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasequeue/partition"
	"github.com/golib/lease/leasequeue/queueevent"
)

// everyEvent has one event of each kind.
var everyEvent = []leasequeue.Event{
	&leasequeue.Claimed{EventInfo: leasequeue.EventInfo{Name: "q", ID: "a"}, Attempt: 1, Age: 2 * time.Second},
	&leasequeue.Heartbeat{EventInfo: leasequeue.EventInfo{Name: "q", ID: "a"}},
	&leasequeue.Completed{EventInfo: leasequeue.EventInfo{Name: "q", ID: "a"}, Attempt: 1},
	&leasequeue.Failed{EventInfo: leasequeue.EventInfo{Name: "q", ID: "a"}, Attempt: 1, Cause: errors.New("boom")},
	&leasequeue.Lost{EventInfo: leasequeue.EventInfo{Name: "q", ID: "a", Err: errors.New("lease lost")}},
	&leasequeue.Pruned{EventInfo: leasequeue.EventInfo{Name: "q", Key: "q/prune/"}, Removed: 3},
	&queueevent.Assigned{EventInfo: leasequeue.EventInfo{Name: "g", ID: "p"}},
	&queueevent.Revoked{EventInfo: leasequeue.EventInfo{Name: "g", ID: "p"}, Reason: partition.ErrRevoked},
	&queueevent.Rebalanced{EventInfo: leasequeue.EventInfo{Name: "g"}, Members: []string{"a", "b"}, Target: 2},
}

func TestSlogObserverLogsEveryEvent(t *testing.T) {
	var buf bytes.Buffer
	var seen []leasequeue.Event
	obs := leasequeue.MultiObserver(
		leasequeue.NewSlogObserver(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		nil,
		leasequeue.ObserverFunc(func(e leasequeue.Event) { seen = append(seen, e) }),
		leasequeue.NopObserver,
	)
	for _, e := range everyEvent {
		obs.Observe(e)
	}
	if len(seen) != len(everyEvent) {
		t.Fatalf("MultiObserver passed on %d of %d events", len(seen), len(everyEvent))
	}
	for _, want := range []string{
		`level=INFO msg="item claimed"`, `level=DEBUG msg="lease renewed"`, `level=INFO msg="item completed"`,
		`level=WARN msg="item failed"`, `level=ERROR msg="lease lost"`, `level=INFO msg="partition assigned"`,
		`level=INFO msg="partition revoked"`, `level=INFO msg="group rebalanced"`, `cause=boom`, `members="[a b]"`, `age=2s`,
		`level=INFO msg="finished items pruned"`, `removed=3`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, buf.String())
		}
	}
	if n := strings.Count(buf.String(), "\n"); n != len(everyEvent) {
		t.Errorf("%d log lines for %d events", n, len(everyEvent))
	}
}
