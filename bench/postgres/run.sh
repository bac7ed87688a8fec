#!/bin/sh
# Runs the PostgreSQL benchmarks ROUNDS times (default 6), interleaving the
# implementations in every round so that a change in the machine's load
# hits them all alike, and prints benchstat's comparison with the floor.
# Each round starts its own PostgreSQL server through the test harness
# (fsync off, synchronous_commit on). Raw results go to $OUT (default a
# temporary file, named at the end).
set -eu
cd "$(dirname "$0")"
rounds=${ROUNDS:-6}
out=${OUT:-$(mktemp)}
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
go test -c -o "$bin" .
: >"$out"
for i in $(seq "$rounds"); do
	"$bin" -test.run '^$' -test.bench 'Cycle|SerialPaired' -test.benchtime 1s >>"$out"
done
"$bin" -test.run '^$' -test.bench 'HandOver' -test.benchtime 30x -test.count 6 >>"$out"
benchstat -col /impl -row /mode -filter '.name:Cycle' "$out"
benchstat -filter '.name:SerialPaired' -col /impl "$out"
benchstat -filter '.name:HandOver' "$out"
echo "raw results: $out"
