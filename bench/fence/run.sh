#!/bin/sh
# Runs the fence benchmarks ROUNDS times (default 6), each round running the
# plain and the fenced write one after the other so that a change in the
# machine's load hits both alike, and prints benchstat's comparison of
# fenced with plain, then the paired runs (both writes alternately in every
# iteration), whose ratios are the steadiest on a busy machine. The servers are started by the test harness
# (valkey-server on PATH, PostgreSQL's initdb/postgres), or named by
# LEASE_VALKEY_ADDR and LEASE_POSTGRES_URL. Raw results go to $OUT (default
# a temporary file, named at the end).
set -eu
cd "$(dirname "$0")"
rounds=${ROUNDS:-6}
out=${OUT:-$(mktemp)}
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
go test -c -o "$bin" .
: >"$out"
for i in $(seq "$rounds"); do
	"$bin" -test.run '^$' -test.bench . -test.benchtime "${BENCHTIME:-1s}" >>"$out"
done
benchstat -filter '.name:Tx OR .name:Set' -col /impl -row .name,/mode "$out"
benchstat -filter '.name:Paired' "$out"
echo "raw results: $out"
