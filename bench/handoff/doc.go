// Package handoff holds a benchmark of the leadership gap during a rolling
// restart of three replicas (issue 27), on Valkey, PostgreSQL and the
// memory store: the time without a leader between the end of the old
// leader's lease on the backend and the new leader's Acquire returning,
// when the stopping leader hands the lease off (Handle.HandOff to the
// waiting replicas), releases it (Handle.Release, the waiters woken by the
// release notification), or just stops and lets it expire. It has no code
// of its own; see docs/performance.md ("Hand-off") for the results and
// run.sh for the command that produces them.
package handoff
