#!/bin/sh
# Runs the rolling-restart benchmarks ROUNDS times (default 6), every
# backend and method in every round, and prints benchstat's tables of the
# leadership gap per restart (median and max within a round) and of the
# ticks of a leasescheduler Elector's 100ms task that no replica ran
# (one rolling restart per round), on Valkey (standalone), PostgreSQL and
# the memory store. The servers are started by the test harness
# (valkey-server and PostgreSQL on PATH; PostgreSQL with fsync off), or
# named by LEASE_VALKEY_ADDR and LEASE_POSTGRES_URL.
#
#   ROUNDS=6 BASE=<git rev> OUT=<file>   see ../lib.sh
#   BENCHTIME=1s                         per gap benchmark and round (the
#                                        expiry method makes one rolling
#                                        restart of 3 replicas whatever it;
#                                        the Elector's benchmark makes one)
#   BACKEND=valkey|postgres|memory       one backend only
set -eu
cd "$(dirname "$0")"
baseline=handoff
round() {
	bench -test.bench "^BenchmarkRollingRestart\$/backend=${BACKEND:-}" -test.benchtime "${BENCHTIME:-1s}"
	bench -test.bench "^BenchmarkElectorRollingRestart\$/backend=${BACKEND:-}" -test.benchtime 1x
}
# A row per backend, a column per method.
layout="-col /method -row /backend"
tables() {
	stat -filter '.unit:(gap-median-ms OR gap-max-ms)'
	stat -filter '.unit:(skipped-ticks OR ticks OR stop-to-lead-max-ms)'
	# A skip is rare: the median over the rounds hides it, the sum does not.
	echo "ticks skipped over all rounds:"
	awk '$1 ~ /^BenchmarkElectorRollingRestart\// { s[$1] += $3; t[$1] += $7 }
		END { for (k in s) printf "  %s  %d of %d\n", k, s[k], t[k] }' "$out" | sort
}
. ../lib.sh
