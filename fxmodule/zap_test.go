package fxmodule_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	leasefx "github.com/golib/lease/fxmodule"
	"github.com/golib/lease/lease"
)

// TestZapObserverEveryEvent sends every event kind through the zap
// observer, the way fx's allfxevents analyzer checks its loggers.
func TestZapObserverEveryEvent(t *testing.T) {
	info := func(token lease.Token, err error) lease.EventInfo {
		return lease.EventInfo{Key: "k", Owner: "o", Token: token, Latency: 3 * time.Millisecond, Err: err}
	}
	lost := &lease.LostError{Key: "k", Token: 7, Reason: lease.Superseded}
	unknown := lease.Indeterminate(errors.New("i/o timeout"))
	held := &lease.NotAcquiredError{Key: "k", Holder: "other", Token: 6, Remaining: time.Second}
	tests := []struct {
		event lease.Event
		level zapcore.Level
		msg   string
		extra map[string]any // fields besides key, owner, token, latency, error
	}{
		{&lease.Acquired{EventInfo: info(7, nil), Attempts: 2, Waited: 150 * time.Millisecond}, zapcore.InfoLevel, "lease acquired", map[string]any{"attempts": int64(2), "waited": 150 * time.Millisecond}},
		{&lease.AcquireFailed{EventInfo: info(0, held), Attempts: 1, Waited: 3 * time.Millisecond}, zapcore.DebugLevel, "lease not acquired", map[string]any{"attempts": int64(1), "waited": 3 * time.Millisecond}},
		{&lease.AcquireFailed{EventInfo: info(0, context.Canceled), Attempts: 1, Waited: time.Second}, zapcore.DebugLevel, "lease not acquired", map[string]any{"attempts": int64(1), "waited": time.Second}},
		{&lease.AcquireFailed{EventInfo: info(0, unknown), Attempts: 3, Waited: 4 * time.Second}, zapcore.WarnLevel, "lease not acquired", map[string]any{"attempts": int64(3), "waited": 4 * time.Second}},
		{&lease.AcquireFailed{EventInfo: info(0, lease.Indeterminate(context.Canceled)), Attempts: 2}, zapcore.WarnLevel, "lease not acquired", map[string]any{"attempts": int64(2), "waited": time.Duration(0)}},
		{&lease.Renewed{EventInfo: info(7, nil)}, zapcore.DebugLevel, "lease renewed", nil},
		{&lease.RenewFailed{EventInfo: info(7, unknown)}, zapcore.WarnLevel, "lease renewal failed", nil},
		{&lease.Lost{EventInfo: info(7, lost)}, zapcore.ErrorLevel, "lease lost", nil},
		{&lease.Released{EventInfo: info(7, nil)}, zapcore.InfoLevel, "lease released", nil},
		{&lease.ReleaseFailed{EventInfo: info(7, lost)}, zapcore.WarnLevel, "lease release failed", nil},
		{&lease.ReleaseFailed{EventInfo: info(7, unknown)}, zapcore.ErrorLevel, "lease release failed", nil},
	}
	kinds := make(map[string]bool)
	for _, tt := range tests {
		kinds[fmt.Sprintf("%T", tt.event)] = true
		t.Run(fmt.Sprintf("%T/%v", tt.event, tt.level), func(t *testing.T) {
			logger, recorded := logs()
			leasefx.NewZapObserver(logger).Observe(tt.event)
			entries := recorded.AllUntimed()
			if len(entries) != 1 {
				t.Fatalf("%d entries, want 1: %v", len(entries), entries)
			}
			e := entries[0]
			if e.Level != tt.level || e.Message != tt.msg {
				t.Errorf("entry %v %q, want %v %q", e.Level, e.Message, tt.level, tt.msg)
			}
			i := tt.event.Info()
			want := map[string]any{"key": "k", "owner": "o", "token": uint64(i.Token), "latency": 3 * time.Millisecond}
			if i.Err != nil {
				want["error"] = i.Err.Error()
			}
			for k, v := range tt.extra {
				want[k] = v
			}
			got := e.ContextMap()
			if len(got) != len(want) {
				t.Errorf("fields %v, want %v", got, want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("field %s = %#v, want %#v", k, got[k], v)
				}
			}
		})
	}
	if len(kinds) != 7 {
		t.Errorf("the table covers %d event kinds, want all 7: %v", len(kinds), kinds)
	}
}

func TestZapObserverLevels(t *testing.T) {
	// Renewals are Debug: a logger at Info drops them.
	core, recorded := observerAt(zapcore.InfoLevel)
	o := leasefx.NewZapObserver(zap.New(core))
	o.Observe(&lease.Renewed{EventInfo: lease.EventInfo{Key: "k", Owner: "o", Token: 1}})
	if recorded.Len() != 0 {
		t.Errorf("a renewal was logged at Info: %v", recorded.All())
	}
	// A nil logger is silent and safe.
	leasefx.NewZapObserver(nil).Observe(&lease.Lost{EventInfo: lease.EventInfo{Key: "k"}})
}
