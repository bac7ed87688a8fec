package leasequeue

import (
	"fmt"
	"strings"
	"time"

	"github.com/golib/lease/lease"
)

// Defaults of the retention options of the sources (PostgresOptions,
// ValkeyOptions, MemoryOptions): how long a finished item is kept, on the
// source's clock, before Sweep may remove it. They are River's (its job
// cleaner deletes completed jobs after 24 hours and discarded ones after
// 7 days); Oban's pruner keeps every finished job for 60 seconds.
const (
	// DefaultDoneRetention is how long a done item is kept.
	DefaultDoneRetention = 24 * time.Hour
	// DefaultDeadRetention is how long a dead (dead-lettered) item is
	// kept: longer, so that someone can look into why it failed.
	DefaultDeadRetention = 7 * 24 * time.Hour
)

// retention is how long a source keeps its finished items, per state:
// positive, or lease.KeepForever.
type retention struct{ done, dead time.Duration }

// newRetention returns the retention of the options done and dead: 0 for
// the default, a negative value to keep the items for good.
func newRetention(done, dead time.Duration) retention {
	return retention{done: retentionOr(done, DefaultDoneRetention), dead: retentionOr(dead, DefaultDeadRetention)}
}

func retentionOr(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return lease.KeepForever
	}
	return d
}

// of returns the retention of the items in state s (Done or Dead).
func (r retention) of(s State) time.Duration {
	if s == Done {
		return r.done
	}
	return r.dead
}

// A walk of a source's Sweep visits the done items, then the dead ones,
// each in the order they finished. Its cursor is the state being visited,
// followed by a space and the source's position in it (nothing at the
// start of the state): "done", "done 1733040000000000 email-7", "dead 40".

// parseSweepCursor returns the state and the position of cursor c: the
// first state the walk visits for "".
func parseSweepCursor(c string) (State, string, error) {
	if c == "" {
		return Done, "", nil
	}
	state, pos, _ := strings.Cut(c, " ")
	if s := State(state); s == Done || s == Dead {
		return s, pos, nil
	}
	return "", "", fmt.Errorf("leasequeue: sweep: %q is not a cursor of this source", c)
}

// sweepCursor returns the cursor of position pos in state s.
func sweepCursor(s State, pos string) string {
	if pos == "" {
		return string(s)
	}
	return string(s) + " " + pos
}

// start returns where a page of the walk begins for cursor: the state and
// the position in it, or false if the walk has nothing (left) to prune.
func (r retention) start(cursor string) (State, string, bool, error) {
	state, pos, err := parseSweepCursor(cursor)
	if err != nil {
		return "", "", false, err
	}
	st, ok := r.from(state)
	if st != state {
		pos = ""
	}
	return st, pos, ok, nil
}

// from returns the first state the walk prunes at or after s, and false
// if there is none (every later state is kept for good).
func (r retention) from(s State) (State, bool) {
	if s == Done && r.done >= 0 {
		return Done, true
	}
	return Dead, r.dead >= 0
}

// after returns the cursor that begins the state after s, or "" if the
// walk ends with s.
func (r retention) after(s State) string {
	if s == Done && r.dead >= 0 {
		return string(Dead)
	}
	return ""
}

// ceilMicros returns d in whole microseconds, rounded up.
func ceilMicros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}
