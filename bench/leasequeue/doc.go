// Package leasequeue benchmarks package leasequeue's PostgreSQL source
// against the loops users would write or pick instead, all on the same
// PostgreSQL server in one run, at 1 and at 8 workers:
//
//   - plain: the baseline, the cheapest honest SKIP LOCKED queue: one
//     statement claims an item (UPDATE ... WHERE id = (SELECT ... FOR
//     UPDATE SKIP LOCKED LIMIT 1) RETURNING, hiding it for a visibility
//     timeout so a crashed worker's item comes back) and one marks it done,
//     on a table of its own with a partial index on the pending items;
//   - leasequeue: leasequeue.New and Run with a PostgresSource, through the
//     public API only, as a user would;
//   - river: github.com/riverqueue/river with riverpgxv5, its own
//     migrations (rivermigrate) and a no-op worker.
//
// Every worker runs a no-op handler, so items/s is the queue's own cost.
// run.sh runs the rounds and prints the ratios to plain; see
// docs/performance.md for the results.
package leasequeue
