// Package postgres holds benchmarks of the PostgreSQL lease backend against
// the plain one-statement upsert lease (the baseline, plain-upsert), the
// usual alternatives (pg_try_advisory_lock on a pinned connection, a naive
// SELECT ... FOR UPDATE lease table) and the floor, two SELECT 1 round
// trips, all on the same PostgreSQL server in one run. The implementations
// are the table cyclers; add one there and every benchmark and run.sh's
// summary include it. LEASE_BENCH_DURABLE=1 (run.sh's DURABLE=1) runs the
// server durably. It has no code of its own; see docs/performance.md for
// the results and run.sh for the command that produces them.
package postgres
