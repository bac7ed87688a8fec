package obscheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// This file is a small Prometheus: it scrapes targets over HTTP into an
// in-memory store, stamping each scrape with a virtual time the test
// moves, and evaluates the alerting rules of docs/lease.rules.yml on it
// with Prometheus' own PromQL engine, as a rule group would at each
// evaluation. Virtual time lets a test show an alert with `for: 1m` or a
// 5-minute rate() window fire and clear in a second of real time: the
// processes scraped keep running on real time, and only the timestamps of
// their samples are the test's.

// rulesFile is the rules file, relative to this package.
const rulesFile = "../../../docs/lease.rules.yml"

// loadRules parses and validates the rules file as Prometheus does.
func loadRules(t testing.TB) []rulefmt.Rule {
	t.Helper()
	rules, err := parseRules()
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

func parseRules() ([]rulefmt.Rule, error) {
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var rules []rulefmt.Rule
	for _, g := range groups.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules, nil
}

// sample is one float sample; it implements chunks.Sample.
type sample struct {
	t int64
	f float64
}

func (s sample) T() int64                      { return s.t }
func (s sample) ST() int64                     { return 0 }
func (s sample) F() float64                    { return s.f }
func (s sample) H() *histogram.Histogram       { return nil }
func (s sample) FH() *histogram.FloatHistogram { return nil }
func (s sample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s sample) Copy() chunks.Sample           { return s }

type series struct {
	lset    labels.Labels
	samples []sample
}

// memStore holds scraped samples; it is the engine's storage.Queryable.
type memStore struct {
	mu     sync.Mutex
	series map[string]*series // by lset.String()
}

func (db *memStore) add(lset labels.Labels, t int64, f float64) {
	db.mu.Lock()
	defer db.mu.Unlock()
	k := lset.String()
	s := db.series[k]
	if s == nil {
		s = &series{lset: lset}
		db.series[k] = s
	}
	s.samples = append(s.samples, sample{t, f})
}

// Querier implements storage.Queryable.
func (db *memStore) Querier(mint, maxt int64) (storage.Querier, error) {
	return &querier{db: db, mint: mint, maxt: maxt}, nil
}

type querier struct {
	db         *memStore
	mint, maxt int64
}

func (q *querier) Select(_ context.Context, sortSeries bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	q.db.mu.Lock()
	defer q.db.mu.Unlock()
	var out []storage.Series
	for _, s := range q.db.series {
		match := true
		for _, m := range ms {
			match = match && m.Matches(s.lset.Get(m.Name))
		}
		if !match {
			continue
		}
		var in []chunks.Sample
		for _, x := range s.samples {
			if x.t >= q.mint && x.t <= q.maxt {
				in = append(in, x)
			}
		}
		if len(in) > 0 {
			out = append(out, storage.NewListSeries(s.lset, in))
		}
	}
	if sortSeries {
		slices.SortFunc(out, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	}
	return &seriesSet{ss: out}
}

func (*querier) LabelValues(context.Context, string, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (*querier) LabelNames(context.Context, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (*querier) Close() error { return nil }

type seriesSet struct {
	ss []storage.Series
	i  int
}

func (s *seriesSet) Next() bool                      { s.i++; return s.i <= len(s.ss) }
func (s *seriesSet) At() storage.Series              { return s.ss[s.i-1] }
func (*seriesSet) Err() error                        { return nil }
func (*seriesSet) Warnings() annotations.Annotations { return nil }

// target is one process's /metrics endpoint.
type target struct {
	instance string
	url      string
	last     map[string]labels.Labels // the series of its last scrape
}

// alertState is one rule's state, as Prometheus keeps it: pending since
// its expression first returned something, firing once that has lasted
// the rule's `for`.
type alertState struct {
	pendingSince time.Time
	fired        bool // has fired at some point
	firing       bool
	cleared      bool // has cleared after firing
}

// prom scrapes targets and evaluates the rules at a virtual time.
type prom struct {
	t       *testing.T
	now     time.Time
	db      *memStore
	engine  *promql.Engine
	targets []*target
	rules   []rulefmt.Rule
	state   map[string]*alertState
	log     []string // alert transitions, for failure messages
}

func newProm(t *testing.T, start time.Time) *prom {
	return &prom{
		t:      t,
		now:    start,
		db:     &memStore{series: map[string]*series{}},
		engine: promql.NewEngine(promql.EngineOpts{MaxSamples: 1e7, Timeout: 10 * time.Second}),
		rules:  loadRules(t),
		state:  map[string]*alertState{},
	}
}

// target adds the endpoint at url as instance.
func (p *prom) target(instance, url string) *target {
	tg := &target{instance: instance, url: url}
	p.targets = append(p.targets, tg)
	return tg
}

// step moves virtual time by d and scrapes every target at the new time,
// then evaluates the rules.
func (p *prom) step(d time.Duration) {
	p.t.Helper()
	p.now = p.now.Add(d)
	for _, tg := range p.targets {
		p.scrape(tg)
	}
	p.evaluate()
}

// steps calls step(d) until total has passed.
func (p *prom) steps(total, d time.Duration) {
	p.t.Helper()
	for end := p.now.Add(total); p.now.Before(end); {
		p.step(d)
	}
}

func (p *prom) ms() int64 { return p.now.UnixMilli() }

// scrape reads tg over HTTP as Prometheus does and stores its samples at
// the virtual time, with the labels job and instance, and up. Series that
// are gone since the last scrape get a staleness marker.
func (p *prom) scrape(tg *target) {
	p.t.Helper()
	base := labels.FromStrings("job", "lease", "instance", tg.instance)
	up := labels.NewBuilder(base).Set(model.MetricNameLabel, "up").Labels()
	seen := map[string]labels.Labels{}
	p.scrapeInto(tg, base, seen)
	p.db.add(up, p.ms(), 1)
	for k, l := range tg.last {
		if _, ok := seen[k]; !ok {
			p.db.add(l, p.ms(), math.Float64frombits(value.StaleNaN))
		}
	}
	tg.last = seen
}

func (p *prom) scrapeInto(tg *target, base labels.Labels, seen map[string]labels.Labels) {
	p.t.Helper()
	resp, err := http.Get(tg.url)
	if err != nil {
		p.t.Fatalf("scrape %s: %v", tg.instance, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		p.t.Fatalf("scrape %s: %s", tg.instance, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		p.t.Fatalf("scrape %s: %v", tg.instance, err)
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			b := labels.NewBuilder(base)
			for _, l := range m.GetLabel() {
				b.Set(l.GetName(), l.GetValue())
			}
			put := func(metric string, v float64, extra ...string) {
				b := labels.NewBuilder(b.Labels())
				b.Set(model.MetricNameLabel, metric)
				for i := 0; i+1 < len(extra); i += 2 {
					b.Set(extra[i], extra[i+1])
				}
				l := b.Labels()
				seen[l.String()] = l
				p.db.add(l, p.ms(), v)
			}
			switch {
			case m.Counter != nil:
				put(name, m.GetCounter().GetValue())
			case m.Gauge != nil:
				put(name, m.GetGauge().GetValue())
			case m.Untyped != nil:
				put(name, m.GetUntyped().GetValue())
			case m.Histogram != nil:
				h := m.GetHistogram()
				for _, bk := range h.GetBucket() {
					put(name+"_bucket", float64(bk.GetCumulativeCount()), "le", formatLe(bk.GetUpperBound()))
				}
				put(name+"_bucket", float64(h.GetSampleCount()), "le", "+Inf")
				put(name+"_sum", h.GetSampleSum())
				put(name+"_count", float64(h.GetSampleCount()))
			}
		}
	}
}

func formatLe(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// query evaluates expr at the virtual time.
func (p *prom) query(expr string) promql.Vector {
	p.t.Helper()
	q, err := p.engine.NewInstantQuery(context.Background(), p.db, nil, expr, p.now)
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		p.t.Fatalf("%s: %v", expr, res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// evaluate evaluates every alerting rule at the virtual time and moves its
// state.
func (p *prom) evaluate() {
	p.t.Helper()
	for _, r := range p.rules {
		if r.Alert == "" {
			continue
		}
		st := p.state[r.Alert]
		if st == nil {
			st = &alertState{}
			p.state[r.Alert] = st
		}
		v := p.query(r.Expr)
		switch {
		case len(v) == 0:
			if st.firing {
				st.cleared = true
				p.log = append(p.log, fmt.Sprintf("%s %s cleared", p.now.Format(time.TimeOnly), r.Alert))
			}
			st.pendingSince, st.firing = time.Time{}, false
		case st.pendingSince.IsZero():
			st.pendingSince = p.now
			fallthrough
		default:
			if !st.firing && p.now.Sub(st.pendingSince) >= time.Duration(r.For) {
				st.firing, st.fired = true, true
				p.log = append(p.log, fmt.Sprintf("%s %s firing: %v", p.now.Format(time.TimeOnly), r.Alert, v))
			}
		}
	}
}

// firing reports whether alert fires now.
func (p *prom) firing(alert string) bool {
	p.t.Helper()
	st, ok := p.state[alert]
	if !ok {
		p.t.Fatalf("no rule %s in %s", alert, rulesFile)
	}
	return st.firing
}

// wantFiring fails the test unless alert fires now (want) or does not.
func (p *prom) wantFiring(alert string, want bool, when string) {
	p.t.Helper()
	if got := p.firing(alert); got != want {
		p.t.Fatalf("%s: %s firing = %v, want %v; alert log:\n%s", when, alert, got, want, strings.Join(p.log, "\n"))
	}
}

// firedAndCleared fails the test unless each alert fired and then cleared
// during the run, and checks that none of never ever fired.
func (p *prom) firedAndCleared(alerts []string, never ...string) {
	p.t.Helper()
	for _, a := range alerts {
		st := p.state[a]
		if st == nil || !st.fired || !st.cleared || st.firing {
			p.t.Errorf("%s did not fire and then clear; alert log:\n%s", a, strings.Join(p.log, "\n"))
		}
	}
	for _, a := range never {
		if st := p.state[a]; st != nil && st.fired {
			p.t.Errorf("%s fired; alert log:\n%s", a, strings.Join(p.log, "\n"))
		}
	}
}
