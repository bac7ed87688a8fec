// Package groups holds benchmarks of semaphore permits and sets of keys
// (lease.Client's AcquirePermit and AcquireSet, issue 26) on each backend:
// a permit acquire→release against a lease acquire→release (the
// baseline, lease), a 3-key set against 3 single leases taken in order
// (leases3), and on Valkey a set against bsm/redislock's ObtainMulti on
// the same keys (obtainmulti). The keys of a set share a hash tag, as a
// Valkey cluster needs, also on standalone Valkey and PostgreSQL. It has
// no code of its own; see docs/performance.md ("Semaphores and sets") for
// the results and run.sh for the command that produces them.
package groups
