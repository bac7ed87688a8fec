package leasescheduler_test

import (
	"testing"
	"time"

	"github.com/golib/lease/leasescheduler"
)

func TestEvery(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		slots     leasescheduler.SlotFunc
		now, want string
	}{
		{leasescheduler.Every(time.Second), "2026-11-30T10:00:05Z", "2026-11-30T10:00:05Z"},
		{leasescheduler.Every(time.Second), "2026-11-30T10:00:05.003Z", "2026-11-30T10:00:05Z"},  // late
		{leasescheduler.Every(time.Second), "2026-11-30T10:00:04.999Z", "2026-11-30T10:00:05Z"},  // early (a slewed clock)
		{leasescheduler.Every(time.Second), "2026-11-30T10:00:05.749Z", "2026-11-30T10:00:05Z"},  // up to 3/4 late
		{leasescheduler.Every(time.Second), "2026-11-30T10:00:05.750Z", "2026-11-30T10:00:06Z"},  // then the next slot
		{leasescheduler.Every(5 * time.Minute), "2026-11-30T10:04:59Z", "2026-11-30T10:05:00Z"},  // early
		{leasescheduler.Every(24 * time.Hour), "2026-11-30T03:00:00.2Z", "2026-11-30T00:00:00Z"}, // daily at 03:00 UTC
		{leasescheduler.Every(time.Hour), "1969-12-31T22:59:59.9Z", "1969-12-31T23:00:00Z"},      // before the epoch
		{leasescheduler.EveryFrom(at("2026-01-01T00:30:00Z"), time.Hour), "2026-11-30T10:30:01Z", "2026-11-30T10:30:00Z"},
		{leasescheduler.EveryFrom(at("2026-01-01T00:30:00Z"), time.Hour), "2026-11-30T10:29:00Z", "2026-11-30T10:30:00Z"},
	} {
		s, ok := c.slots("job", at(c.now))
		if !ok || !s.Start.Equal(at(c.want)) || s.End.Sub(s.Start) <= 0 {
			t.Errorf("at %s: %v, %v; want the slot starting at %s", c.now, s, ok, c.want)
		}
	}

	// Consecutive slots have consecutive indices.
	every := leasescheduler.Every(time.Minute)
	a, _ := every("job", at("2026-11-30T10:00:00Z"))
	b, _ := every("job", at("2026-11-30T10:01:00Z"))
	if b.Index != a.Index+1 || !b.Start.Equal(a.End) {
		t.Errorf("consecutive slots %v and %v", a, b)
	}
}

func TestEveryRejectsABadInterval(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Every(0) did not panic")
		}
	}()
	leasescheduler.Every(0)
}
