#!/bin/sh
# Runs the rolling-restart benchmark ROUNDS times (default 6), every
# backend and method in every round, and prints benchstat's tables of the
# leadership gap per restart (median and max within a round), on Valkey
# (standalone), PostgreSQL and the memory store. The servers are started
# by the test harness (valkey-server and PostgreSQL on PATH; PostgreSQL
# with fsync off), or named by LEASE_VALKEY_ADDR and LEASE_POSTGRES_URL.
#
#   ROUNDS=6 BASE=<git rev> OUT=<file>   see ../lib.sh
#   BENCHTIME=1s                         per benchmark and round (the
#                                        expiry method makes one rolling
#                                        restart of 3 replicas whatever it)
#   BACKEND=valkey|postgres|memory       one backend only
set -eu
cd "$(dirname "$0")"
baseline=handoff
round() {
	bench -test.bench "RollingRestart/backend=${BACKEND:-}" -test.benchtime "${BENCHTIME:-1s}"
}
# A row per backend, a column per method.
layout="-col /method -row /backend"
tables() {
	stat -filter '.unit:(gap-median-ms OR gap-max-ms)'
}
. ../lib.sh
