// Package postgres holds benchmarks of the PostgreSQL lease backend against
// the usual alternatives (pg_try_advisory_lock on a pinned connection, a
// naive SELECT ... FOR UPDATE lease table) and against the floor, two
// SELECT 1 round trips, all on the same PostgreSQL server in one run. It
// has no code of its own; see docs/performance.md for the results and the
// command that produces them.
package postgres
