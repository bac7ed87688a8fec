#!/bin/sh
# Runs the PostgreSQL benchmarks ROUNDS times (default 6), every impl in
# every round, so that a change in the machine's load hits them all alike,
# and prints benchstat's tables and the ratio of each impl to plain-upsert:
# serial (a time ratio: of the cycles measured one after the other, and
# x-plain of BenchmarkSerialPaired, which alternates them cycle by cycle),
# at 16 goroutines (a throughput ratio: of Cycle's parallel16 runs, and
# x-plain of BenchmarkParallelPaired, which alternates batches), and the
# allocations per cycle. Each
# benchmark starts its own PostgreSQL server through the test harness
# (fsync off, synchronous_commit on).
#
#   DURABLE=1                            the server runs with fsync,
#                                        synchronous_commit and
#                                        full_page_writes on, as users run
#                                        it; the summary's per op column is
#                                        the latency of one lease operation
#   ROUNDS=6 BASE=<git rev> OUT=<file>   see ../lib.sh
#   BENCHTIME=1s                         per benchmark and round
#   EXTRAS=1                             also BenchmarkHandOver (release to a
#                                        waiter's grant, with and without
#                                        notifications), 6 times at the end
set -eu
cd "$(dirname "$0")"
if [ "${DURABLE:-0}" = 1 ]; then
	export LEASE_BENCH_DURABLE=1
	echo "==> durable server: fsync=on synchronous_commit=on full_page_writes=on"
fi
baseline=plain-upsert
ops=2 # an acquire→release cycle is two lease operations
round() {
	bench -test.bench 'Cycle|Paired' -test.benchtime "${BENCHTIME:-1s}"
}
layout="-col /impl -row /mode"
tables() {
	stat -filter '.name:Cycle .unit:(sec/op OR allocs/op)'
	stat -filter '.name:(SerialPaired OR ParallelPaired) .unit:x-plain' -row .name
	if [ "${EXTRAS:-0}" = 1 ]; then
		stat -filter '.name:HandOver .unit:(median-ms OR p90-ms)' -row .fullname
	fi
}
extras="-test.bench HandOver -test.benchtime 30x -test.count 6"
. ../lib.sh
