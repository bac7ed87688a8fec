package leasescheduler

import (
	"fmt"
	"time"
)

// A Slot is one scheduled time of a job: the runs of all replicas that
// belong to it share one slot lease, so only one of them runs.
type Slot struct {
	// Start is the slot's scheduled time.
	Start time.Time
	// End is the next slot's scheduled time. The slot lease is held until
	// half an interval after End.
	End time.Time
	// Index numbers the slots of a job: consecutive slots have consecutive
	// indices. It picks which of the job's three slot keys the slot uses.
	Index int64
}

// IsZero reports whether s is the zero Slot, which a Run has when its job
// is not run once per slot.
func (s Slot) IsZero() bool { return s.Start.IsZero() && s.End.IsZero() && s.Index == 0 }

func (s Slot) String() string {
	return fmt.Sprintf("slot %d [%s, %s)", s.Index, s.Start.UTC().Format(time.RFC3339Nano), s.End.UTC().Format(time.RFC3339Nano))
}

// A SlotFunc says which slot a run of job that starts at now belongs to. It
// returns false for a job that is not run once per slot, which then only
// never runs on two replicas at once. It must be deterministic: every
// replica must map a run of the same scheduled time to the same slot.
type SlotFunc func(job string, now time.Time) (Slot, bool)

// Every returns a SlotFunc for jobs scheduled every interval at multiples of
// interval since the Unix epoch: every second, every 5 minutes, every hour
// on the hour, every UTC day at midnight. A run belongs to the slot that
// starts at or before now + interval/4, so it may start up to a quarter
// interval early and three quarters late. A schedule that is off the grid
// by less than a quarter interval also works (a daily job at 03:00 UTC with
// Every(24*time.Hour)); for other offsets use EveryFrom. It panics if
// interval is not positive.
func Every(interval time.Duration) SlotFunc {
	return EveryFrom(time.Unix(0, 0), interval)
}

// EveryFrom is Every for the grid of origin plus multiples of interval: for
// example EveryFrom(time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC), time.Hour)
// for an hourly job at half past. It panics if interval is not positive.
func EveryFrom(origin time.Time, interval time.Duration) SlotFunc {
	if interval <= 0 {
		panic(fmt.Sprintf("leasescheduler: slot interval %v is not positive", interval))
	}
	return func(_ string, now time.Time) (Slot, bool) {
		d := int64(interval)
		off := now.Sub(origin) + interval/4 // saturates far from origin, which is fine for any real clock
		i := int64(off) / d
		if int64(off)%d < 0 {
			i-- // floor, also before origin
		}
		start := origin.Add(time.Duration(i * d))
		return Slot{Start: start, End: start.Add(interval), Index: i}, true
	}
}
