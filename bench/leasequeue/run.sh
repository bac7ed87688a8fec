#!/bin/sh
# Runs BenchmarkQueue ROUNDS times (default 6): each round runs every impl
# (plain SKIP LOCKED, leasequeue, River) at 1 and at 8 workers, one after
# the other, so that a change in the machine's load hits them all alike.
# Prints benchstat's items/s and statements per item with confidence
# intervals, and the ratio of each impl to plain at each worker count. The PostgreSQL server is started
# by the test harness (fsync off) or named by LEASE_POSTGRES_URL.
#
#   ROUNDS=6 BASE=<git rev> OUT=<file>   see ../lib.sh
#   BENCHTIME=3000x                      items per impl and round
set -eu
cd "$(dirname "$0")"
baseline=plain
round() {
	bench -test.bench Queue -test.benchtime "${BENCHTIME:-3000x}"
}
layout="-col /impl -row /workers"
tables() {
	stat -filter .unit:items/s
	stat -filter .unit:stmts/item
}
. ../lib.sh
