#!/bin/sh
# Runs the benchmarks of semaphore permits and sets of keys ROUNDS times
# (default 6), every impl in every round, so that a change in the machine's
# load hits them all alike, and prints benchstat's tables and benchsum's
# ratios, serially, on Valkey (standalone), PostgreSQL and the memory
# store: the paired ratios of BenchmarkSerialPaired (a permit over a lease,
# x-lease; a 3-key set over 3 single leases taken in order, x-leases3; a
# set over bsm/redislock's ObtainMulti, x-obtainmulti, Valkey only), which
# are the steadiest, and each impl's cycle one after the other
# (BenchmarkCycle) with its time over a lease's, and on Valkey the
# server's CPU time per cycle. The servers are started by
# the test harness (valkey-server and PostgreSQL on PATH; PostgreSQL with
# fsync off), or named by LEASE_VALKEY_ADDR and LEASE_POSTGRES_URL.
#
#   ROUNDS=6 BASE=<git rev> OUT=<file>   see ../lib.sh
#   BENCHTIME=2000x                      cycles per benchmark and round
#   BACKEND=valkey|postgres|memory       one backend only
set -eu
cd "$(dirname "$0")"
baseline=lease
# The summary's per op column is the time of one cycle (an acquire→release
# of a lease, a permit, 3 leases or a set).
round() {
	bench -test.bench "(Cycle|SerialPaired)/backend=${BACKEND:-}" -test.benchtime "${BENCHTIME:-2000x}"
}
# A row per backend; in the Cycle tables a column per impl, each compared
# with lease, the first.
layout="-col /impl -row /backend"
tables() {
	stat -filter '.name:SerialPaired .unit:(x-lease OR x-leases3 OR x-obtainmulti)'
	stat -filter '.name:Cycle .unit:(sec/op OR server-us/cycle OR allocs/op)'
}
. ../lib.sh
