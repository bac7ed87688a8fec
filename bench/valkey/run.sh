#!/bin/sh
# Runs the Valkey benchmarks ROUNDS times (default 6), interleaving the
# implementations in every round so that a change in the machine's load
# hits them all alike, and prints benchstat's comparison with the floor.
# The server is started by the test harness (valkey-server on PATH), or
# named by LEASE_VALKEY_ADDR. Raw results go to $OUT (default a temporary
# file, named at the end).
set -eu
cd "$(dirname "$0")"
rounds=${ROUNDS:-6}
out=${OUT:-$(mktemp)}
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
go test -c -o "$bin" .
: >"$out"
for i in $(seq "$rounds"); do
	# A failed benchmark (a timeout on an overloaded machine) loses its own
	# sample, not the round's.
	"$bin" -test.run '^$' -test.bench 'Cycle|SerialPaired' -test.benchtime 2s >>"$out" || true
done
"$bin" -test.run '^$' -test.bench 'ManagedRenewal' -test.benchtime 1x -test.count 3 >>"$out"
benchstat -col /impl -row /mode -filter '.name:Cycle' "$out"
benchstat -filter '.name:SerialPaired' -col /impl "$out"
benchstat -filter '.name:ManagedRenewal' "$out"
echo "raw results: $out"
