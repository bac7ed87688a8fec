// Package leasequeue benchmarks package leasequeue's PostgreSQL source:
// items per second through five workers, each item under its own lease,
// against the same loop without leases (plain SELECT ... FOR UPDATE SKIP
// LOCKED claiming on the same table), in one run on the same server. It
// has no code of its own; see docs/performance.md ("Queues") for the
// results and run.sh for the command that produces them.
package leasequeue
