// Package footprint measures what the library's records cost as the work
// grows (issue 23, "Bounded footprint"). BenchmarkFootprint drives a
// million distinct lease keys through acquire→release on each backend,
// with a short retention, and reports, in one run,
//
//   - the footprint at the start (the store empty, its client connected
//     and its scripts or statements ready), at the peak (after the
//     million keys) and after the retention has passed and
//     lease.Client.Sweep ran: on Valkey the server's used_memory (INFO
//     memory) and DBSIZE, with the largest of each seen during the run;
//     on PostgreSQL pg_total_relation_size, pg_table_size and
//     pg_indexes_size of the lease table, its rows (count, and how many
//     are live leases), n_live_tup and n_dead_tup (pg_stat_user_tables,
//     after pg_stat_force_next_flush on every idle connection), its
//     autovacuum and autoanalyze counts and the last page holding a row
//     (VACUUM truncates only the pages after it), both as the sweep left
//     the table ("after") and after the VACUUM that autovacuum would run
//     next ("vacuumed");
//   - the latency (p50, p99) and throughput of fresh-key acquire→release
//     pairs through lease.Client at 0, 100k and 1M keys already driven,
//     and after the sweep, at a fixed number of goroutines, with what the
//     server did meanwhile (keys its expiry deleted; sequential scans,
//     autovacuums and autoanalyzes of the table);
//   - whether the goals hold: Valkey's used_memory after the retention
//     within 5% of the start; no PostgreSQL row after the sweep but the
//     live leases' (the sweep's own lease, lease.SweepKey, keeps its row
//     for a retention, and is shown apart); p50, p99 and pairs/s at 1M
//     within 10% of those at 0.
//
// BenchmarkQueueFootprint tells the same story for package leasequeue: a
// million items enqueued, claimed and completed (a no-op handler) by one
// Queue.Run, on a ValkeySource and a PostgresSource with DoneRetention the
// retention and Run's own background prune every retention, as a
// deployment runs it; the throughput includes the enqueue, the latency is
// claim→complete, and the footprint is the queue table's (PostgreSQL) or
// the server's (Valkey). Its goals: the same, with unfinished items for
// live leases and Queue.Prune for the sweep.
//
// Every ratio is to the start of the same run. Each point runs its pairs
// in four chunks alternating with the same pairs on a control store (a
// dedicated Valkey server; a second table in the same PostgreSQL
// database), emptied before each point, so that the control's ratios show
// what the machine's load did meanwhile, apart from the number of keys.
//
// The figures are reported with b.ReportMetric, the footprint as
// sub-benchmarks stage=start, peak, after (and vacuumed), the points as
// impl=h0, h100k, h1M and swept so that benchsum compares each with h0, and
// a table for people on lines starting with "# ". Each backend runs the
// whole story once (with two cores, about a minute and a half for leases
// on Valkey, five for leases on PostgreSQL, two and a half for the queue
// on Valkey, four for the queue on PostgreSQL), so the benchmarks run
// with -test.benchtime=1x:
//
//	sh bench/footprint/run.sh                    # both stories on both backends, as make bench does
//	STORY=leases BACKEND=valkey sh bench/footprint/run.sh  # one story (leases, queue), one backend (valkey, postgres)
//	KEYS=100000 RETENTION=10s PAIRS=4000 WORKERS=32 sh bench/footprint/run.sh
//
// KEYS, RETENTION, PAIRS and WORKERS (run.sh's names for
// LEASE_FOOTPRINT_KEYS, _RETENTION, _PAIRS and _WORKERS) change the size
// of the run: a million keys (or items), 30s, 20,000 pairs (or items) per
// point and 32 goroutines (or Run slots) by default. The servers are the test harness's throwaway
// ones (valkey-server on PATH, PostgreSQL's initdb/postgres; the
// PostgreSQL server runs with fsync off), or those named by
// LEASE_VALKEY_ADDR and LEASE_POSTGRES_URL; Valkey's figures are the whole
// server's, so give it a server of its own. The background sweep of the
// lease clients is off: the lease story sweeps once, after the
// retention, so PostgreSQL's peak is every row of the run, where a
// deployment's client (ClientOptions.SweepEvery, an hour by default)
// keeps about an hour and a retention of ended leases. On Valkey a
// released record ends by itself (its TTL is the retention), so the peak
// is about a retention's worth of keys whatever the run's length. The
// queue story's Run prunes every retention, so its peak is about two
// retentions' worth of items.
package footprint
