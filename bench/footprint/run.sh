#!/bin/sh
# Runs BenchmarkFootprint and BenchmarkQueueFootprint once each: on
# Valkey and on PostgreSQL, a million lease keys through acquire→release
# (and a million queue items through enqueue→claim→complete) with a 30s
# retention, the footprint at the start, the peak and after the retention
# and a sweep, and the latency and throughput at 0, 100k and 1M keys
# (see doc.go). About fourteen minutes with two cores. Prints the run's table with its ratios to the start and the
# goals met or missed, benchstat's tables, and benchsum's ratio of each
# point's throughput to h0. The servers are started by the test harness or
# named by LEASE_VALKEY_ADDR and LEASE_POSTGRES_URL.
#
#   STORY=leases|queue                   one story (default both)
#   BACKEND=valkey|postgres              one backend (default both)
#   KEYS=1000000 RETENTION=30s           keys driven; the stores' retention
#   PAIRS=20000 WORKERS=32               pairs per point; goroutines
#   FOOTPRINT_ROUNDS=1                   runs of the whole story (ROUNDS
#                                        of ../lib.sh; make bench's ROUNDS
#                                        does not apply: one run is ten
#                                        minutes)
#   FOOTPRINT_BASE=<git rev>             BASE of ../lib.sh (a revision that
#                                        has bench/footprint); make bench's
#                                        BASE does not apply
#   OUT=<file>                           see ../lib.sh
set -eu
cd "$(dirname "$0")"
ROUNDS=${FOOTPRINT_ROUNDS:-1}
BASE=${FOOTPRINT_BASE:-}
[ -n "${KEYS:-}" ] && export LEASE_FOOTPRINT_KEYS="$KEYS"
[ -n "${RETENTION:-}" ] && export LEASE_FOOTPRINT_RETENTION="$RETENTION"
[ -n "${PAIRS:-}" ] && export LEASE_FOOTPRINT_PAIRS="$PAIRS"
[ -n "${WORKERS:-}" ] && export LEASE_FOOTPRINT_WORKERS="$WORKERS"
baseline=h0
round() {
	case ${STORY:-} in
	leases) top=BenchmarkFootprint ;;
	queue) top=BenchmarkQueueFootprint ;;
	*) top='Benchmark(Queue)?Footprint' ;;
	esac
	bench -test.bench "^$top\$/backend=${BACKEND:-}" -test.benchtime 1x -test.timeout 60m
}
layout="-col /impl -row .name,/backend"
tables() {
	# The run's own table, with the ratios to the start of the same run.
	sed -n 's/^# //p' "$out"
	echo
	echo "==> the same figures in benchstat's tables"
	stat -filter '/impl:/./ .unit:(items/s OR p50-ms OR p99-ms OR ctl-items/s)'
	stat -filter '/stage:/./ .unit:(used-bytes OR keys OR total-bytes OR rows)' -col /stage
}
. ../lib.sh
