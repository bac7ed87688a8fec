package footprint_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// config is the size of a run; run.sh sets it through the environment.
type config struct {
	keys      int64         // distinct keys driven through acquire→release (LEASE_FOOTPRINT_KEYS)
	retention time.Duration // Options.Retention of the stores (LEASE_FOOTPRINT_RETENTION)
	pairs     int           // acquire→release pairs measured at each point (LEASE_FOOTPRINT_PAIRS)
	workers   int           // goroutines driving and measuring (LEASE_FOOTPRINT_WORKERS)
}

func loadConfig(b *testing.B) config {
	c := config{keys: 1_000_000, retention: 30 * time.Second, pairs: 20_000, workers: 32}
	if v := os.Getenv("LEASE_FOOTPRINT_KEYS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 10 {
			b.Fatalf("LEASE_FOOTPRINT_KEYS=%q: want a whole number of at least 10", v)
		}
		c.keys = n
	}
	if v := os.Getenv("LEASE_FOOTPRINT_RETENTION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			b.Fatalf("LEASE_FOOTPRINT_RETENTION=%q: want a duration of at least 1s", v)
		}
		c.retention = d
	}
	if v := os.Getenv("LEASE_FOOTPRINT_PAIRS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < chunks {
			b.Fatalf("LEASE_FOOTPRINT_PAIRS=%q: want a whole number of at least %d", v, chunks)
		}
		c.pairs = n
	}
	if v := os.Getenv("LEASE_FOOTPRINT_WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("LEASE_FOOTPRINT_WORKERS=%q: want a positive whole number", v)
		}
		c.workers = n
	}
	return c
}

// policy is the lease policy of every pair: the lease is released long
// before its TTL, and the generous OperationTimeout keeps a loaded
// machine from failing a pair now and then (see bench/valkey).
var policy = func() lease.Policy {
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second, OperationTimeout: 2 * time.Second})
	if err != nil {
		panic(err)
	}
	return p
}()

// A driver drives fresh keys or items through a store: the store under
// measurement, or the control beside it.
type driver interface {
	// run drives n fresh keys (or items) with workers goroutines (or
	// slots). It adds them to into: their latencies when record is set,
	// and always their wall time and errors. record is false while the
	// run only drives the count up between points.
	run(ctx context.Context, n int64, workers int, into *sample, record bool)
	// driven is how many it has driven so far.
	driven() int64
}

// A side is one lease.Client and the keys it has driven.
type side struct {
	client *lease.Client
	prefix string       // of its keys: prefix + a 7-digit number
	next   atomic.Int64 // keys driven so far
}

func newSide(b *testing.B, be lease.Backend, prefix string) *side {
	// No background sweep: the run sweeps when it means to.
	c, err := lease.NewClient(be, lease.ClientOptions{Owner: "footprint", SweepEvery: -1})
	if err != nil {
		b.Fatal(err)
	}
	return &side{client: c, prefix: prefix}
}

// A sample is the acquire→release pairs of one side at one point.
type sample struct {
	lat   []time.Duration // of each pair that succeeded
	busy  time.Duration   // wall time of the chunks that ran them
	errs  int64
	first error
}

func (s *sample) ops() float64 { return float64(len(s.lat)) / s.busy.Seconds() }

// pct returns the p-th percentile (0 < p < 1) of the latencies.
func (s *sample) pct(p float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	v := slices.Clone(s.lat)
	slices.Sort(v)
	return v[min(len(v)-1, int(p*float64(len(v))))]
}

// run drives n fresh keys through TryAcquire→Release with workers
// goroutines. It adds the pairs to into: their latencies when record is
// set, and always their wall time and errors.
func (s *side) run(ctx context.Context, n int64, workers int, into *sample, record bool) {
	base := s.next.Load()
	var (
		claimed atomic.Int64
		mu      sync.Mutex
		wg      sync.WaitGroup
	)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			var lat []time.Duration
			var errs int64
			var first error
			buf := make([]byte, 0, 16)
			for {
				j := claimed.Add(1) - 1
				if j >= n {
					break
				}
				buf = append(append(buf[:0], s.prefix...), fmt.Sprintf("%07d", base+j)...)
				began := time.Now()
				err := s.pair(ctx, string(buf))
				if err != nil {
					errs++
					if first == nil {
						first = err
					}
					continue
				}
				if record {
					lat = append(lat, time.Since(began))
				}
			}
			mu.Lock()
			into.lat = append(into.lat, lat...)
			into.errs += errs
			if into.first == nil {
				into.first = first
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	into.busy += time.Since(start)
	s.next.Add(n)
}

// warmUp runs cfg.warmups() pairs on s under keys of their own (prefix
// "w"), so that the first point does not pay for what the client, the
// connections and the server set up on first use. The caller removes
// their records.
func warmUp(ctx context.Context, s *side, cfg config) error {
	warm := &side{client: s.client, prefix: "w"}
	var smp sample
	warm.run(ctx, cfg.warmups(), cfg.workers, &smp, false)
	if smp.errs > 0 {
		return fmt.Errorf("warm-up: %d pairs failed: %w", smp.errs, smp.first)
	}
	return nil
}

// warmups is how many pairs warmUp runs: a quarter of a point's.
func (c config) warmups() int64 { return int64(max(c.pairs/4, 4*c.workers)) }

func (s *side) driven() int64 { return s.next.Load() }

func (s *side) pair(ctx context.Context, key string) error {
	h, err := s.client.TryAcquire(ctx, key, policy)
	if err != nil {
		return err
	}
	return h.Release(ctx)
}

// A figure is one number of a footprint snapshot.
type figure struct {
	label string // in the table
	unit  string // of b.ReportMetric
	v     float64
}

// A stage is a footprint snapshot at one moment of the run.
type stage struct {
	name string
	figs []figure
}

func (s stage) get(unit string) float64 {
	for _, f := range s.figs {
		if f.unit == unit {
			return f.v
		}
	}
	return 0
}

// A backend is one store under measurement, with its control beside it.
type backend interface {
	// target is the store under measurement; control is a store of its
	// own (a second server, a second table), emptied before each point by
	// resetControl, so that the same pairs on an empty store tell what
	// the machine's load did meanwhile.
	target() driver
	control() driver
	resetControl(ctx context.Context) error
	// sweep removes what outlived its retention, as a deployment does on
	// schedule (Client.Sweep, Queue.Prune), and says what it ran.
	sweep(ctx context.Context) (int, string, error)
	// what names a point's unit of work and its latency.
	what() string
	// work returns counters of the target server's own work (Valkey: keys
	// its expiry deleted; PostgreSQL: sequential scans of the table, and
	// autovacuum and autoanalyze runs of it finished), whose growth during
	// a point tells what ran beside the pairs, or how the planner ran
	// them.
	work(ctx context.Context) ([]figure, error)
	// beforeSweep runs once the retention has passed, before the sweep.
	beforeSweep(ctx context.Context) error
	// snapshot takes the footprint of the target.
	snapshot(ctx context.Context, name string) (stage, error)
	// settle runs once the retention has passed and the sweep ran: it
	// waits for the server's own clean-up where there is one, and returns
	// the stages after it.
	settle(ctx context.Context) ([]stage, error)
	// footprintGoal says whether the stages meet the backend's footprint
	// goal, and how.
	footprintGoal(stages []stage) (string, bool)
	describe(cfg config) string
}

// BenchmarkFootprint drives cfg.keys distinct keys through acquire→release
// on each backend, with a short retention, and reports the footprint at
// the start, at the peak and after the retention and a sweep (stage=...),
// and the latency and throughput of fresh acquire→release pairs at 0, a
// tenth of and all the keys driven, and after the sweep (impl=h..., named
// so that benchsum compares each with h0). Each backend runs the whole
// story once: run it with -test.benchtime=1x (run.sh does); the numbers
// are taken outside b.Run, so a larger b.N only repeats their report.
func BenchmarkFootprint(b *testing.B) {
	cfg := loadConfig(b)
	for _, bk := range []struct {
		name string
		open func(*testing.B, config) backend
	}{{"valkey", openValkey}, {"postgres", openPostgres}} {
		b.Run("backend="+bk.name, func(b *testing.B) { story(b, cfg, bk.name, bk.open(b, cfg)) })
	}
}

// A point is the pairs measured at one number of historical keys.
type point struct {
	name            string
	before          int64 // keys driven before it
	target, control sample
	allocs, bytes   float64  // per pair, of both sides
	work            []figure // backend.work's growth during the point
}

// chunks is how many parts of a point's pairs each side runs, the two
// alternating (target first in the even parts, control in the odd ones),
// so that a change of the machine's load hits both alike.
const chunks = 8

func measure(ctx context.Context, b *testing.B, be backend, cfg config, name string) *point {
	if err := be.resetControl(ctx); err != nil {
		b.Fatal(err)
	}
	p := &point{name: name, before: be.target().driven()}
	w0, err := be.work(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	for i := range chunks {
		n := int64(cfg.pairs / chunks)
		if i == chunks-1 {
			n = int64(cfg.pairs - (chunks-1)*(cfg.pairs/chunks))
		}
		if i%2 == 0 {
			be.target().run(ctx, n, cfg.workers, &p.target, true)
			be.control().run(ctx, n, cfg.workers, &p.control, true)
		} else {
			be.control().run(ctx, n, cfg.workers, &p.control, true)
			be.target().run(ctx, n, cfg.workers, &p.target, true)
		}
	}
	runtime.ReadMemStats(&ms1)
	w1, err := be.work(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for i, f := range w1 {
		f.v -= w0[i].v
		p.work = append(p.work, f)
	}
	total := float64(2 * cfg.pairs)
	p.allocs = float64(ms1.Mallocs-ms0.Mallocs) / total
	p.bytes = float64(ms1.TotalAlloc-ms0.TotalAlloc) / total
	progress("measured %s: p50 %v p99 %v %.0f/s (control: p50 %v p99 %v %.0f/s)", name,
		p.target.pct(0.5), p.target.pct(0.99), p.target.ops(), p.control.pct(0.5), p.control.pct(0.99), p.control.ops())
	return p
}

// driveTo drives the target's keys up to n.
func driveTo(ctx context.Context, b *testing.B, be backend, cfg config, n int64, errs *sample) {
	left := n - be.target().driven()
	if left <= 0 {
		return
	}
	start := time.Now()
	be.target().run(ctx, left, cfg.workers, errs, false)
	el := time.Since(start)
	progress("drove %d to %d in %v (%.0f/s)", left, n, el.Round(time.Millisecond), float64(left)/el.Seconds())
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "footprint: "+format+"\n", args...)
}

// story runs the whole measurement on one backend.
func story(b *testing.B, cfg config, name string, be backend) {
	ctx := context.Background()
	began := time.Now()
	progress("%s: %s", name, be.describe(cfg))
	var stages []stage
	snap := func(s string) {
		st, err := be.snapshot(ctx, s)
		if err != nil {
			b.Fatal(err)
		}
		stages = append(stages, st)
		reportStage(b, st)
	}
	var points []*point
	at := func(name string) {
		p := measure(ctx, b, be, cfg, name)
		points = append(points, p)
		reportPoint(b, p, points[0])
	}
	var drive sample

	snap("start")
	at("h0")
	tenth := cfg.keys / 10
	driveTo(ctx, b, be, cfg, tenth, &drive)
	at("h" + count(tenth))
	driveTo(ctx, b, be, cfg, cfg.keys, &drive)
	snap("peak")
	at("h" + count(cfg.keys))

	// Every record of the run ended by now: wait out the retention, then
	// sweep as a deployment does, on schedule.
	wait := cfg.retention + time.Second
	progress("waiting %v for the retention to pass", wait)
	time.Sleep(wait)
	if err := be.beforeSweep(ctx); err != nil {
		b.Fatal(err)
	}
	sweepStart := time.Now()
	removed, sweeper, err := be.sweep(ctx)
	if err != nil {
		b.Fatal(err)
	}
	sweepTook := time.Since(sweepStart)
	progress("%s removed %d in %v", sweeper, removed, sweepTook.Round(time.Millisecond))
	after, err := be.settle(ctx)
	if err != nil {
		b.Fatal(err)
	}
	after[0].figs = append(after[0].figs, figure{"removed by " + sweeper, "swept", float64(removed)}, figure{sweeper + " took", "sweep-s", sweepTook.Seconds()})
	for _, st := range after {
		stages = append(stages, st)
		reportStage(b, st)
	}
	at("swept")

	errs := drive.errs
	for _, p := range points {
		errs += p.target.errs + p.control.errs
	}
	driven := be.target().driven()
	fmt.Print(table(name, be.describe(cfg), cfg, be, stages, points, driven, errs, time.Since(began)))
	if errs > driven/1000 {
		first := drive.first
		for _, p := range points {
			if first == nil {
				first = p.target.first
			}
			if first == nil {
				first = p.control.first
			}
		}
		b.Errorf("%d of %d pairs failed; the first: %v", errs, driven, first)
	}
}

// count names a number of keys: 100000 is 100k, 1000000 is 1M.
func count(n int64) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.FormatInt(n/1_000_000, 10) + "M"
	case n >= 1_000 && n%1_000 == 0:
		return strconv.FormatInt(n/1_000, 10) + "k"
	}
	return strconv.FormatInt(n, 10)
}

// reportStage reports a footprint snapshot as its own sub-benchmark.
func reportStage(b *testing.B, st stage) {
	b.Run("stage="+st.name, func(b *testing.B) {
		for _, f := range st.figs {
			b.ReportMetric(f.v, f.unit)
		}
		b.ReportMetric(0, "ns/op") // nothing was timed here
		b.ReportMetric(0, "B/op")
		b.ReportMetric(0, "allocs/op")
	})
}

// reportPoint reports a point as its own sub-benchmark, impl=<name>:
// items/s (pairs per second of the target), the latency percentiles, the
// control's, and, at every point but the first, the ratios of the
// target's percentiles to those at the first point (x-, which benchsum
// prints as they are).
func reportPoint(b *testing.B, p, first *point) {
	b.Run("impl="+p.name, func(b *testing.B) {
		b.ReportMetric(p.target.ops(), "items/s")
		b.ReportMetric(float64(p.target.busy.Nanoseconds())/float64(len(p.target.lat)+int(p.target.errs)), "ns/op")
		b.ReportMetric(ms(p.target.pct(0.5)), "p50-ms")
		b.ReportMetric(ms(p.target.pct(0.99)), "p99-ms")
		b.ReportMetric(p.control.ops(), "ctl-items/s")
		b.ReportMetric(ms(p.control.pct(0.5)), "ctl-p50-ms")
		b.ReportMetric(ms(p.control.pct(0.99)), "ctl-p99-ms")
		b.ReportMetric(float64(p.before), "keys-before")
		for _, f := range p.work {
			b.ReportMetric(f.v, f.unit)
		}
		b.ReportMetric(p.allocs, "allocs/op")
		b.ReportMetric(p.bytes, "B/op")
		if p != first {
			b.ReportMetric(float64(p.target.pct(0.5))/float64(first.target.pct(0.5)), "x-p50")
			b.ReportMetric(float64(p.target.pct(0.99))/float64(first.target.pct(0.99)), "x-p99")
		}
	})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// table renders the run's figures for people, every line starting with
// "# " so that benchstat and benchsum, which read the same output, skip
// it.
func table(name, desc string, cfg config, be backend, stages []stage, points []*point, driven, errs int64, took time.Duration) string {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(&buf, "%s: %s\n", name, desc)
	fmt.Fprintf(&buf, "%d driven, %d failed, %v in all\n\n", driven, errs, took.Round(time.Second))

	fmt.Fprintf(&buf, "footprint (ratio: to start)\n")
	header := "stage\t"
	for _, f := range stages[0].figs {
		header += f.label + "\t"
	}
	fmt.Fprintln(tw, header)
	start := stages[0]
	for _, st := range stages {
		line := st.name + "\t"
		for _, f := range start.figs {
			line += human(st.get(f.unit), f.unit)
			if base := start.get(f.unit); strings.HasSuffix(f.unit, "bytes") && base > 0 && st.name != "start" {
				line += fmt.Sprintf(" (%.2f×)", st.get(f.unit)/base)
			}
			line += "\t"
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	for _, st := range stages {
		var extra []string
		for _, f := range st.figs {
			if !slices.ContainsFunc(start.figs, func(g figure) bool { return g.unit == f.unit }) {
				extra = append(extra, fmt.Sprintf("%s %s", f.label, human(f.v, f.unit)))
			}
		}
		if len(extra) > 0 {
			fmt.Fprintf(&buf, "  %s: %s\n", st.name, strings.Join(extra, ", "))
		}
	}

	fmt.Fprintf(&buf, "\n%s, %d per point, %d at once (ratio: to h0; control: the same on an emptied control store, interleaved)\n", be.what(), cfg.pairs, cfg.workers)
	tw = tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	header = "point\tbefore\tp50\tp99\tper s\tp50 ratio\tp99 ratio\tper s ratio\tcontrol p50\tcontrol p99\tcontrol per s\tcontrol per s ratio\t"
	for _, f := range points[0].work {
		header += f.label + "\t"
	}
	fmt.Fprintln(tw, header)
	h0 := points[0]
	for _, p := range points {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.0f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%.0f\t%.2f\t", p.name, p.before,
			dur(p.target.pct(0.5)), dur(p.target.pct(0.99)), p.target.ops(),
			ratio(p.target.pct(0.5), h0.target.pct(0.5)), ratio(p.target.pct(0.99), h0.target.pct(0.99)), p.target.ops()/h0.target.ops(),
			dur(p.control.pct(0.5)), dur(p.control.pct(0.99)), p.control.ops(), p.control.ops()/h0.control.ops())
		for _, f := range p.work {
			fmt.Fprintf(tw, "%.0f\t", f.v)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()

	fmt.Fprintf(&buf, "\ngoals\n")
	desc, ok := be.footprintGoal(stages)
	fmt.Fprintf(&buf, "  %s: %s\n", verdict(ok), desc)
	full := points[len(points)-2] // at all the keys, before the sweep
	for _, g := range []struct {
		what     string
		at, zero float64
		higher   bool
	}{
		{"p50", ms(full.target.pct(0.5)), ms(h0.target.pct(0.5)), false},
		{"p99", ms(full.target.pct(0.99)), ms(h0.target.pct(0.99)), false},
		{"per s", full.target.ops(), h0.target.ops(), true},
	} {
		r := g.at / g.zero
		ok := r <= 1.10
		if g.higher {
			ok = r >= 1/1.10
		}
		var ctl float64
		switch g.what {
		case "p50":
			ctl = ms(full.control.pct(0.5)) / ms(h0.control.pct(0.5))
		case "p99":
			ctl = ms(full.control.pct(0.99)) / ms(h0.control.pct(0.99))
		default:
			ctl = full.control.ops() / h0.control.ops()
		}
		fmt.Fprintf(&buf, "  %s: %s at %s / at h0 = %.2f, within 10%%? (control's ratio %.2f; corrected for it %.2f)\n",
			verdict(ok), g.what, full.name, r, ctl, r/ctl)
	}
	var out strings.Builder
	for line := range strings.Lines(buf.String()) {
		out.WriteString("# " + strings.TrimRight(line, " \n") + "\n")
	}
	return out.String()
}

func verdict(ok bool) string {
	if ok {
		return "met   "
	}
	return "MISSED"
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

func dur(d time.Duration) string {
	return strconv.FormatFloat(ms(d), 'f', 2, 64) + "ms"
}

// human formats a figure: bytes in MB (10^6), counts as they are.
func human(v float64, unit string) string {
	switch {
	case strings.HasSuffix(unit, "bytes"):
		return strconv.FormatFloat(v/1e6, 'f', 3, 64) + " MB"
	case strings.HasSuffix(unit, "-s"):
		return strconv.FormatFloat(v, 'f', 1, 64) + "s"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
