package cache_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/golib/lease/cache"
	"github.com/golib/lease/guard"
)

// TestSlogObserverLogsEveryEvent sends every event kind through the slog
// adapter and checks the level, the message and the key.
func TestSlogObserverLogsEveryEvent(t *testing.T) {
	boom := errors.New("boom")
	info := func(err error) cache.EventInfo { return cache.EventInfo{Key: "page:/home", Token: 7, Err: err} }
	for _, tc := range []struct {
		e     cache.Event
		level string
		msg   string
	}{
		{&cache.Served{EventInfo: info(nil), Outcome: cache.Hit}, "DEBUG", "cache served"},
		{&cache.GetFailed{EventInfo: info(boom)}, "WARN", "cache get failed"},
		{&cache.GetFailed{EventInfo: info(context.Canceled)}, "INFO", "cache get failed"},
		{&cache.Refreshed{EventInfo: info(nil)}, "INFO", "cache refreshed"},
		{&cache.RefreshFailed{EventInfo: info(boom)}, "WARN", "cache refresh published nothing"},
		{&cache.RefreshFailed{EventInfo: info(&cache.InvalidatedError{Key: "page:/home"})}, "INFO", "cache refresh published nothing"},
		{&cache.Published{EventInfo: info(nil), Size: 3}, "DEBUG", "cache published"},
		{&cache.PublishRefused{EventInfo: info(&guard.NotCurrentError{Key: "cache:page:/home"})}, "INFO", "cache publication refused"},
		{&cache.PublishRefused{EventInfo: info(boom)}, "WARN", "cache publication refused"},
		{&cache.Invalidated{EventInfo: info(nil)}, "INFO", "cache invalidated"},
		{&cache.Invalidated{EventInfo: info(boom)}, "WARN", "cache invalidated"},
	} {
		var buf bytes.Buffer
		obs := cache.NewSlogObserver(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
		obs.Observe(tc.e)
		line := buf.String()
		for _, want := range []string{"level=" + tc.level, `msg="` + tc.msg + `"`, `key=page:/home`, "token=7"} {
			if !strings.Contains(line, want) {
				t.Errorf("%T (err %v): %q lacks %s", tc.e, tc.e.Info().Err, line, want)
			}
		}
	}
	// A nil logger means slog.Default(); it must not panic.
	cache.NewSlogObserver(nil).Observe(&cache.Served{Outcome: cache.Stale})
}

func TestOutcomeStrings(t *testing.T) {
	for o, want := range map[cache.Outcome]string{cache.Hit: "hit", cache.Loaded: "loaded", cache.Shared: "shared", cache.Stale: "stale", 0: "Outcome(0)"} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", int(o), got, want)
		}
	}
}
