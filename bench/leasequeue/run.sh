#!/bin/sh
# Runs BenchmarkQueue ROUNDS times (default 6), each round running the
# leased and the plain loop one after the other so that a change in the
# machine's load hits both alike, and prints benchstat's comparison. The
# PostgreSQL server is started by the test harness (initdb/postgres) or
# named by LEASE_POSTGRES_URL. Raw results go to $OUT (default a temporary
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
	"$bin" -test.run '^$' -test.bench Queue -test.benchtime "${BENCHTIME:-3000x}" >>"$out"
done
benchstat -col /impl "$out"
echo "raw results: $out"
