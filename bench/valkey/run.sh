#!/bin/sh
# Runs the Valkey benchmarks ROUNDS times (default 6), every impl in every
# round, so that a change in the machine's load hits them all alike, and
# prints benchstat's tables and the ratio of each impl to the bare backend
# (leasevalkey-backend) at 64 goroutines: lease.Client (leasevalkey) and
# the peers (valkeylock, redislock, redsync), of Cycle's parallel64 runs
# and x-backend of BenchmarkParallelPaired, which alternates batches with
# the backend; and the allocations per cycle. The server is started by the
# test harness (valkey-server on PATH) or named by LEASE_VALKEY_ADDR.
#
#   ROUNDS=6 BASE=<git rev> OUT=<file>   see ../lib.sh
#   BENCHTIME=1s                         per benchmark and round
#   EXTRAS=1                             also BenchmarkManagedRenewal (10,000
#                                        managed leases), 6 times at the end
set -eu
cd "$(dirname "$0")"
baseline=leasevalkey-backend
ops=2 # an acquire→release cycle is two lease operations
round() {
	bench -test.bench 'Cycle|ParallelPaired' -test.benchtime "${BENCHTIME:-1s}"
}
layout="-col /impl -row /mode"
tables() {
	stat -filter '.name:Cycle .unit:(sec/op OR allocs/op)'
	stat -filter '.name:ParallelPaired .unit:x-backend' -row .name
	if [ "${EXTRAS:-0}" = 1 ]; then
		stat -filter '.name:ManagedRenewal'
	fi
}
extras="-test.bench ManagedRenewal -test.benchtime 1x -test.count 6"
. ../lib.sh
