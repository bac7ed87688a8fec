#!/bin/sh
# Runs BenchmarkQueue and BenchmarkPaired ROUNDS times (default 6): each
# round runs the leased and the plain loop one after the other, and the
# paired benchmark alternates them batch by batch, so that a change in the
# machine's load hits both alike. Prints benchstat's comparison. The
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
	"$bin" -test.run '^$' -test.bench Paired -test.benchtime "${PAIRS:-8}x" >>"$out"
done
benchstat -filter .name:Queue -col /impl "$out"
benchstat -filter .name:Paired "$out"
echo "raw results: $out"
