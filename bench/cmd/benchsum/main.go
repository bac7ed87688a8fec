// Command benchsum prints the ratios of the lease benchmarks to their
// baseline from the raw output of `go test -bench` (several rounds, as the
// run.sh scripts under bench/ write it).
//
// Usage:
//
//	benchsum -baseline plain-upsert -ops 2 results.txt
//
// Benchmark names carry their sub-benchmark parts as key=value
// (Cycle/impl=leasepostgres/mode=serial). impl names the implementation
// (benchmarks without one are left out); the other parts name the row's
// group, whose impls are compared with the baseline impl of the same
// group. For each group and impl it prints the
// median of the main metric (items/s when reported, else ns/op), its ratio
// to the baseline's median, the median of the per-round ratios with their
// range (rounds are paired by the "round: N" lines of the input), and the
// median allocs/op. In a group with mode=serial the ratio is one of times
// (lower is better, the serial goal); elsewhere it is one of
// throughputs (higher is better). A metric whose unit begins with "x-" is
// a ratio the benchmark measured itself (a paired benchmark): its median
// and range are printed as they are. In a mode=serial group, per op is
// the median time divided by -ops: the latency of one lease operation.
// The input's "rev: NAME" lines (BASE= runs) split everything by
// revision.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// sample is one benchmark result line.
type sample struct {
	rev, round string
	group      string // the name without impl=
	impl       string
	values     map[string]float64 // by unit
}

func main() {
	baseline := flag.String("baseline", "", "the impl every other impl of a group is compared with")
	ops := flag.Int("ops", 1, "operations per op of a mode=serial benchmark, for the per op column (an acquire→release cycle is 2)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: benchsum -baseline IMPL [file ...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *baseline == "" || *ops < 1 {
		flag.Usage()
		os.Exit(2)
	}
	var samples []sample
	files := flag.Args()
	if len(files) == 0 {
		files = []string{"-"}
	}
	for _, name := range files {
		f := os.Stdin
		if name != "-" {
			var err error
			if f, err = os.Open(name); err != nil {
				fmt.Fprintln(os.Stderr, "benchsum:", err)
				os.Exit(1)
			}
		}
		s, err := parse(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchsum: %s: %v\n", name, err)
			os.Exit(1)
		}
		samples = append(samples, s...)
	}
	if len(samples) == 0 {
		fmt.Fprintln(os.Stderr, "benchsum: no benchmark results in the input")
		os.Exit(1)
	}
	report(os.Stdout, samples, *baseline, *ops)
}

// parse reads go test -bench output: configuration lines "key: value"
// (only rev and round are kept) and result lines.
func parse(r io.Reader) ([]sample, error) {
	var out []sample
	rev, round := "", ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.ContainsAny(k, " \t") {
			switch k {
			case "rev":
				rev = strings.TrimSpace(v)
			case "round":
				round = strings.TrimSpace(v)
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		s := sample{rev: rev, round: round, values: map[string]float64{}}
		if s.group, s.impl = splitName(f[0]); s.impl == "" {
			continue // not a comparison
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: value %q: %v", f[0], f[i], err)
			}
			s.values[f[i+1]] = v
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// splitName strips "Benchmark" and the -GOMAXPROCS suffix from a name and
// takes its impl= part out: BenchmarkCycle/impl=x/mode=serial-2 is group
// Cycle/mode=serial, impl x.
func splitName(name string) (group, impl string) {
	name = strings.TrimPrefix(name, "Benchmark")
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			name = name[:i]
		}
	}
	var parts []string
	for p := range strings.SplitSeq(name, "/") {
		if v, ok := strings.CutPrefix(p, "impl="); ok {
			impl = v
			continue
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "/"), impl
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// series collects one metric of one (rev, group, impl) by round.
type series struct {
	byRound map[string]float64
	all     []float64
}

func (s *series) add(round string, v float64) {
	if s.byRound == nil {
		s.byRound = map[string]float64{}
	}
	s.byRound[round] = v
	s.all = append(s.all, v)
}

type key struct{ rev, group, impl, unit string }

func report(w io.Writer, samples []sample, baseline string, ops int) {
	data := map[key]*series{}
	var revs, groups []string
	impls := map[string][]string{} // by group, in input order
	for _, s := range samples {
		if !slices.Contains(revs, s.rev) {
			revs = append(revs, s.rev)
		}
		if !slices.Contains(groups, s.group) {
			groups = append(groups, s.group)
		}
		if !slices.Contains(impls[s.group], s.impl) {
			impls[s.group] = append(impls[s.group], s.impl)
		}
		for unit, v := range s.values {
			k := key{s.rev, s.group, s.impl, unit}
			if data[k] == nil {
				data[k] = &series{}
			}
			data[k].add(s.round, v)
		}
	}
	rounds := 0
	for _, s := range data {
		rounds = max(rounds, len(s.all))
	}
	fmt.Fprintf(w, "medians of up to %d rounds; ratio: of the medians, to %s in the same group\n", rounds, baseline)
	fmt.Fprintf(w, "(time: lower is better; thrpt: higher is better); paired: median (min–max) of the per-round ratios\n")
	for _, rev := range revs {
		fmt.Fprintln(w)
		if len(revs) > 1 {
			fmt.Fprintf(w, "rev: %s\n", rev)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "group\timpl\tmedian\tratio\tpaired\tallocs/op\tper op")
		for _, g := range groups {
			for _, impl := range impls[g] {
				row(tw, data, rev, g, impl, baseline, ops)
			}
		}
		tw.Flush()
	}
}

// row prints one impl of one group.
func row(w io.Writer, data map[key]*series, rev, group, impl, baseline string, ops int) {
	get := func(impl, unit string) *series { return data[key{rev, group, impl, unit}] }
	// Ratios the benchmark measured itself.
	var selfUnits []string
	for k := range data {
		if k.rev == rev && k.group == group && k.impl == impl && strings.HasPrefix(k.unit, "x-") {
			selfUnits = append(selfUnits, k.unit)
		}
	}
	sort.Strings(selfUnits)
	for _, u := range selfUnits {
		s := get(impl, u)
		fmt.Fprintf(w, "%s\t%s\t%s\t\t%s\t\n", group, impl, u, spread(s.all))
	}
	unit, higher := "items/s", true
	if get(impl, unit) == nil {
		unit, higher = "ns/op", false
	}
	s := get(impl, unit)
	if s == nil || len(selfUnits) > 0 && get(baseline, unit) == nil {
		// A paired benchmark's own time is of both impls together.
		return
	}
	timeRatio := strings.Contains("/"+group+"/", "/mode=serial/")
	ratio, paired := "", ""
	if base := get(baseline, unit); base != nil && impl != baseline {
		r := func(v, b float64) float64 {
			if higher == timeRatio { // items/s as a time ratio, ns/op as a throughput ratio
				return b / v
			}
			return v / b
		}
		ratio = fmt.Sprintf("%.2f×", r(median(s.all), median(base.all)))
		var per []float64
		for round, v := range s.byRound {
			if b, ok := base.byRound[round]; ok && round != "" {
				per = append(per, r(v, b))
			}
		}
		if len(per) > 1 {
			paired = spread(per)
		}
		if timeRatio {
			ratio += " time"
		} else {
			ratio += " thrpt"
		}
	}
	allocs := ""
	if a := get(impl, "allocs/op"); a != nil {
		allocs = strconv.FormatFloat(median(a.all), 'f', -1, 64)
	}
	perOp := ""
	if timeRatio && unit == "ns/op" {
		perOp = format(median(s.all)/float64(ops), unit)
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", group, impl, format(median(s.all), unit), ratio, paired, allocs, perOp)
}

func spread(v []float64) string {
	return fmt.Sprintf("%.2f (%.2f–%.2f)", median(v), slices.Min(v), slices.Max(v))
}

func format(v float64, unit string) string {
	switch unit {
	case "ns/op":
		return fmt.Sprintf("%.1fµs/op", v/1e3)
	case "items/s":
		return fmt.Sprintf("%.0f items/s", v)
	}
	return fmt.Sprintf("%g %s", v, unit)
}
