# lib.sh is sourced by the run.sh of each benchmark directory. It builds the
# directory's test binary, optionally also from another revision (BASE=),
# runs ROUNDS interleaved rounds into one results file and prints
# benchstat's tables and benchsum's ratios.
#
#   ROUNDS=6      rounds (default 6); each runs every benchmark of the round
#   BASE=<rev>    also build the benchmark from git revision <rev> (its tree,
#                 via git archive into a temporary directory) and run both
#                 binaries in every round, the order alternating, labelled
#                 "rev: base" and "rev: head" so benchstat and benchsum show
#                 before and after side by side; <rev>'s bench directory
#                 must have the same benchmarks
#   OUT=<file>    where the raw results go (default a temporary file)
#   EXTRAS=1      also run the run.sh's extra benchmarks once at the end
#
# A run.sh sets these before sourcing:
#   round         a function that runs one round: it calls "bench ARGS..."
#                 for each benchmark invocation, which runs the test binary
#                 of the current revision with ARGS and appends to the results
#   baseline      the impl that benchsum compares the others with
#   tables        a function that prints benchstat's tables: it calls
#                 "stat ARGS..." (benchstat ARGS... with the results file;
#                 with BASE, the table has a column per revision and a row
#                 per benchmark, without it the layout is $layout)
#   layout        benchstat's -col and -row without BASE
#   extras        (optional) the arguments of a benchmark run once for each
#                 revision after the rounds when EXTRAS=1
#   ops           (optional) the operations per op of a serial benchmark,
#                 for benchsum's per op column
set -eu

start=$(date +%s)
here=$(pwd)
rounds=${ROUNDS:-6}
out=${OUT:-$(mktemp)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

command -v benchstat >/dev/null 2>&1 || PATH=$PATH:$(go env GOPATH)/bin
command -v benchstat >/dev/null 2>&1 || {
	echo "run.sh: benchstat is missing: go install golang.org/x/perf/cmd/benchstat@latest (or make deps-bench)" >&2
	exit 1
}

echo "==> building the benchmark$( [ -n "${BASE:-}" ] && echo "s (head and BASE=$BASE)")"
go test -c -o "$tmp/head.test" .
(cd .. && go build -o "$tmp/benchsum" ./cmd/benchsum)
revs=head
if [ -n "${BASE:-}" ]; then
	top=$(git rev-parse --show-toplevel)
	sub=$(git rev-parse --show-prefix)
	mkdir "$tmp/base"
	git -C "$top" archive "$BASE" | tar -x -C "$tmp/base"
	if [ ! -d "$tmp/base/$sub" ]; then
		echo "run.sh: revision $BASE has no ${sub%/}" >&2
		exit 1
	fi
	(cd "$tmp/base/$sub" && go test -c -o "$tmp/base.test" .)
	revs="base head"
fi

: >"$out"
# bench runs the binary of the revision being measured ($rev) with the given
# arguments, from its own directory, and appends its results.
bench() {
	dir=$here
	[ "$rev" = base ] && dir=$tmp/base/$sub
	# A failed run (a timeout on an overloaded machine) loses its own
	# samples, not the whole run; benchsum pairs what is left by round.
	{
		echo "rev: $rev"
		echo "round: $i"
		(cd "$dir" && "$tmp/$rev.test" -test.run '^$' -test.benchmem "$@")
	} >>"$out" || {
		failed=$((failed + 1))
		echo "run.sh: round $i ($rev) failed: $*" >&2
	}
}
failed=0

for i in $(seq "$rounds"); do
	order=$revs
	# Alternate which revision goes first, so neither always follows the other.
	[ $((i % 2)) -eq 0 ] && [ -n "${BASE:-}" ] && order="head base"
	for rev in $order; do
		echo "==> round $i of $rounds${BASE:+ ($rev)}"
		round
	done
done

if [ "${EXTRAS:-0}" = 1 ] && [ -n "${extras:-}" ]; then
	i=extra
	for rev in $revs; do
		echo "==> extras${BASE:+ ($rev)}"
		# shellcheck disable=SC2086 # extras is a list of arguments
		bench $extras
	done
fi

stat() {
	if [ -n "${BASE:-}" ]; then
		benchstat -ignore round -col rev "$@" -row .fullname "$out" # one row per benchmark, whatever the run.sh asked
	else
		# shellcheck disable=SC2086 # layout is a list of arguments
		benchstat -ignore round,rev $layout "$@" "$out"
	fi
}

echo
echo "==> benchstat (95% confidence intervals over the rounds)"
tables
echo
echo "==> summary"
"$tmp/benchsum" -baseline "$baseline" -ops "${ops:-1}" "$out" || true # it says what it lacks
echo
echo "raw results: $out"
echo "wall time: $(($(date +%s) - start))s for $rounds rounds"
if [ "$failed" -gt 0 ]; then
	echo "run.sh: $failed benchmark runs failed; their samples are missing (see the raw results)" >&2
	exit 1
fi
