package telemetry

import (
	"sync"
	"time"

	"github.com/golib/lease/cache/cacheevent"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue/queueevent"
	"github.com/golib/lease/leasescheduler/jobevent"
)

// Kind is how a metric aggregates.
type Kind int

const (
	Counter Kind = iota + 1
	// Current is an up-down count of what is current now, which the
	// adapters read at collection time (Translator.Held): a lease leaves
	// it when it ends, also by expiry, which no event reports.
	Current
	// Gauge is set to each point's Value (a time in Unix seconds).
	Gauge
	Histogram // seconds, unless Unit says otherwise
)

// Label names a point's label. A metric carries the labels its Spec lists.
type Label int

const (
	KeyLabel Label = iota + 1 // the bounded key label, present only when key labels are on
	OutcomeLabel
	ReasonLabel
	OperationLabel
	JobLabel    // a leasescheduler job's name: bounded by the program's own jobs
	ResultLabel // a scheduled run's jobevent.Result
	KindLabel   // what was acquired: KindLease, KindPermit or KindSet
)

// Spec describes one metric; both adapters build their instruments from
// Specs, so they count the same things under matching names.
type Spec struct {
	// Prom is the Prometheus name after the namespace, e.g.
	// "acquisitions_total" or "cache_gets_total".
	Prom string
	// OTel is the OpenTelemetry instrument name, e.g. "lease.acquisitions".
	OTel string
	// Unit is the OTel unit ("s", "{acquisition}").
	Unit string
	Kind Kind
	Help string
	// Labels are the metric's labels in order.
	Labels []Label
}

// Metric indexes Specs.
type Metric int

const (
	Held Metric = iota
	Acquisitions
	AcquireAttempts
	AcquireWait
	BackendRequest
	Renewals
	Losses
	Releases
	UnknownOutcomes
	Handover
	CacheGets
	CacheGetDuration
	CacheRefreshes
	CacheRefreshDuration
	CachePublications
	CacheInvalidations
	QueueClaims
	QueueClaimAttempt
	QueueClaimAge
	QueueCompletions
	QueueRetries
	QueueDeadLetters
	QueueLosses
	QueuePrunes
	QueuePrunedItems
	JobRuns
	JobLastSuccess
	numMetrics
)

// SecondBuckets are both adapters' default histogram buckets for
// durations, in seconds: 0.25 ms (a round trip on a local network) to 30 s
// (a long wait for a holder).
var SecondBuckets = []float64{.00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Specs lists every metric, indexed by Metric.
var Specs = [numMetrics]Spec{
	Held:                 {"held", "lease.held", "{lease}", Current, "Leases, permits and sets this process holds now: acquired, and neither released, lost nor past their local deadline.", []Label{KeyLabel, KindLabel}},
	Acquisitions:         {"acquisitions_total", "lease.acquisitions", "{call}", Counter, "Acquire, AcquirePermit and AcquireSet calls (and their Try variants), by kind and outcome.", []Label{KeyLabel, KindLabel, OutcomeLabel}},
	AcquireAttempts:      {"acquire_attempts_total", "lease.acquire.attempts", "{attempt}", Counter, "Backend acquire attempts made by those calls.", []Label{KeyLabel, KindLabel}},
	AcquireWait:          {"acquire_wait_seconds", "lease.acquire.wait.duration", "s", Histogram, "Time from an acquire call to its end, waiting for a holder included.", []Label{KindLabel, OutcomeLabel}},
	BackendRequest:       {"backend_request_duration_seconds", "lease.backend.request.duration", "s", Histogram, "Duration of one backend request, waiting excluded.", []Label{OperationLabel, OutcomeLabel}},
	Renewals:             {"renewals_total", "lease.renewals", "{renewal}", Counter, "Renewals, by kind and outcome.", []Label{KeyLabel, KindLabel, OutcomeLabel}},
	Losses:               {"losses_total", "lease.losses", "{lease}", Counter, "Leases, permits and sets lost, by kind and reason.", []Label{KeyLabel, KindLabel, ReasonLabel}},
	Releases:             {"releases_total", "lease.releases", "{release}", Counter, "Releases, by kind and outcome.", []Label{KeyLabel, KindLabel, OutcomeLabel}},
	UnknownOutcomes:      {"unknown_outcomes_total", "lease.unknown_outcomes", "{request}", Counter, "Backend requests whose outcome is unknown: they may or may not have been applied.", []Label{OperationLabel}},
	Handover:             {"handover_seconds", "lease.handover.duration", "s", Histogram, "Time from a release to the next grant of the same key, both seen by this process.", nil},
	CacheGets:            {"cache_gets_total", "lease.cache.gets", "{get}", Counter, "Cache Gets, by outcome: hit, loaded, shared (waited for another load), stale, or an error outcome.", []Label{OutcomeLabel}},
	CacheGetDuration:     {"cache_get_duration_seconds", "lease.cache.get.duration", "s", Histogram, "Duration of cache Gets, by outcome.", []Label{OutcomeLabel}},
	CacheRefreshes:       {"cache_refreshes_total", "lease.cache.refreshes", "{refresh}", Counter, "Loads run and published by this process under the refresh lease, by outcome.", []Label{OutcomeLabel}},
	CacheRefreshDuration: {"cache_refresh_duration_seconds", "lease.cache.refresh.duration", "s", Histogram, "Duration of a load and its publication.", nil},
	CachePublications:    {"cache_publications_total", "lease.cache.publications", "{publication}", Counter, "Cache publications, by outcome: ok, not_current, invalidated, unknown, error.", []Label{OutcomeLabel}},
	CacheInvalidations:   {"cache_invalidations_total", "lease.cache.invalidations", "{invalidation}", Counter, "Cache invalidations, by outcome.", []Label{OutcomeLabel}},
	QueueClaims:          {"queue_claims_total", "lease.queue.claims", "{claim}", Counter, "Queue item claims taken (ok) or failed, by outcome.", []Label{OutcomeLabel}},
	QueueClaimAttempt:    {"queue_claim_attempt", "lease.queue.claim.attempt", "{attempt}", Histogram, "The attempt number of each claim taken (1: first try).", nil},
	QueueClaimAge:        {"queue_claim_age_seconds", "lease.queue.claim.age", "s", Histogram, "How long each item taken had been ready (enqueued, or its retry delay over), on the source's clock.", nil},
	QueueCompletions:     {"queue_completions_total", "lease.queue.completions", "{completion}", Counter, "Fenced completions, by outcome (stale and lost: refused).", []Label{OutcomeLabel}},
	QueueRetries:         {"queue_retries_total", "lease.queue.retries", "{attempt}", Counter, "Failed attempts whose item will be retried.", nil},
	QueueDeadLetters:     {"queue_dead_letters_total", "lease.queue.dead_letters", "{item}", Counter, "Items moved to the dead-letter state.", nil},
	QueueLosses:          {"queue_losses_total", "lease.queue.losses", "{lease}", Counter, "Item and partition leases lost, by reason.", []Label{ReasonLabel}},
	QueuePrunes:          {"queue_prunes_total", "lease.queue.prunes", "{prune}", Counter, "Background prunes of the source's finished items run by this process, by outcome.", []Label{OutcomeLabel}},
	QueuePrunedItems:     {"queue_pruned_items_total", "lease.queue.pruned_items", "{item}", Counter, "Finished items removed by background prunes, also by prunes that stopped early.", nil},
	JobRuns:              {"job_runs_total", "lease.job.runs", "{run}", Counter, "Scheduled runs of a job on this process, by result: ok, failed, lost, unchecked (a plain gocron task, its error unseen), skipped (another replica has it), error (its lease could not be taken).", []Label{JobLabel, ResultLabel}},
	JobLastSuccess:       {"job_last_success_timestamp_seconds", "lease.job.last_success", "s", Gauge, "When a run of the job last ended ok on this process, in seconds since the Unix epoch.", []Label{JobLabel}},
}

// Reasons are the values of the reason label, LostReason's results.
var Reasons = []string{"expired", "superseded", "deadline_passed", "force_released", "record_lost", "handed_off", "unknown"}

// Operations are the values of the operation label.
var Operations = []string{"acquire", "renew", "release"}

// Values of the kind label: what an event's acquisition holds.
const (
	KindLease  = "lease"  // one key: Acquire
	KindPermit = "permit" // one permit of a semaphore: AcquirePermit
	KindSet    = "set"    // a set of keys: AcquireSet
)

// zeros lists the counters and histograms whose label values are known in
// advance, with those values (of their one label other than the key or
// job label): the adapters create these series at 0, so that rate() and
// increase() see their first event. A counter or histogram without labels
// (other than the key or job label) starts at 0 without an entry; one with
// labels and no entry is created at its first event.
var zeros = map[Metric][]string{
	Acquisitions:      {OK, NotAcquired, Unknown, Canceled, Error},
	Renewals:          {OK, Lost, Unknown, Canceled, Error},
	Releases:          {OK, Lost, Unknown, Canceled, Error},
	Losses:            Reasons,
	UnknownOutcomes:   Operations,
	BackendRequest:    Operations, // with outcome ok
	CachePublications: {OK, NotCurrent, Invalidated, Unknown, Error},
	QueueCompletions:  {OK, Stale, Lost, Unknown, Error},
	QueueLosses:       Reasons,
	QueuePrunes:       {OK, Unknown, Canceled, Error},
	JobRuns:           resultLabels(),
}

func resultLabels() []string {
	var vs []string
	for _, r := range jobevent.Results {
		vs = append(vs, r.String())
	}
	return vs
}

// has reports whether m carries label l.
func has(m Metric, l Label) bool {
	for _, x := range Specs[m].Labels {
		if x == l {
			return true
		}
	}
	return false
}

// zeroPoints reports, to point, the series created at 0 (Points with
// Zero set): those of the metrics keyed by key label when key is not nil
// (for that label and kind), those of the job metrics when job is not
// nil, and the rest otherwise.
func zeroPoints(point func(Point), key *string, kind string, job *string) {
	for m := range numMetrics {
		spec := Specs[m]
		if spec.Kind != Counter && spec.Kind != Histogram || has(m, KeyLabel) != (key != nil) || has(m, JobLabel) != (job != nil) {
			continue
		}
		p := Point{Metric: m, Zero: true}
		if key != nil {
			p.Key, p.Kind = *key, kind
		}
		if job != nil {
			p.Job = *job
		}
		values, listed := zeros[m]
		other := false
		for _, l := range spec.Labels {
			other = other || l != KeyLabel && l != KindLabel && l != JobLabel
		}
		if other && !listed {
			continue
		}
		if !other {
			point(p)
			continue
		}
		for _, v := range values {
			p.Outcome, p.Reason, p.Operation, p.Result = v, v, v, v
			if m == BackendRequest {
				p.Outcome = OK
			}
			point(p)
		}
	}
}

// Point is one measurement: add Value to a counter, set a gauge to it, or
// observe it in a histogram. Labels the metric does not carry are empty.
type Point struct {
	Metric Metric
	// Zero marks a series to create at 0, before its first event: an
	// adapter creates it and counts or observes nothing.
	Zero      bool
	Value     float64
	Key       string // the bounded key label; "" when key labels are off
	Kind      string // KindLease, KindPermit or KindSet, on the metrics of acquisitions
	Outcome   string
	Reason    string
	Operation string
	Job       string
	Result    string
}

// Values returns p's label values in the order of its Spec's labels,
// leaving out the key label when keyed is false.
func (p Point) Values(keyed bool) []string {
	spec := Specs[p.Metric].Labels
	vs := make([]string, 0, len(spec))
	for _, l := range spec {
		switch l {
		case KeyLabel:
			if keyed {
				vs = append(vs, p.Key)
			}
		case OutcomeLabel:
			vs = append(vs, p.Outcome)
		case ReasonLabel:
			vs = append(vs, p.Reason)
		case OperationLabel:
			vs = append(vs, p.Operation)
		case JobLabel:
			vs = append(vs, p.Job)
		case ResultLabel:
			vs = append(vs, p.Result)
		case KindLabel:
			vs = append(vs, p.Kind)
		}
	}
	return vs
}

// Names returns the label names of m, leaving out the key label when keyed
// is false.
func Names(m Metric, keyed bool) []string {
	var ns []string
	for _, l := range Specs[m].Labels {
		switch l {
		case KeyLabel:
			if keyed {
				ns = append(ns, "key")
			}
		case OutcomeLabel:
			ns = append(ns, "outcome")
		case ReasonLabel:
			ns = append(ns, "reason")
		case OperationLabel:
			ns = append(ns, "operation")
		case JobLabel:
			ns = append(ns, "job_name")
		case ResultLabel:
			ns = append(ns, "result")
		case KindLabel:
			ns = append(ns, "kind")
		}
	}
	return ns
}

// Span is one operation an event reports, for tracing: it ran from Start
// to End.
type Span struct {
	Name       string
	Start, End time.Time
	Key        string // the lease's key; empty in a job's span (lease.job.*)
	Kind       string // KindLease, KindPermit or KindSet in a span of package lease; else empty
	Job        string // the job's name, in a job's span
	Token      lease.Token
	Err        error
	Outcome    string
	// Ints are further integer attributes (attempts, attempt number, size).
	// The Translator builds them only for a span callback, so that a
	// metrics-only adapter allocates no map per event.
	Ints map[string]int64
	// Floats are further attributes in seconds (a claim's age).
	Floats map[string]float64
}

// maxReleased bounds the releases a Translator remembers for the
// hand-over measure: keys can be unbounded (one per queue item), and a key
// released and never acquired again would otherwise stay forever. Past it,
// an arbitrary remembered release is forgotten and its hand-over goes
// unmeasured.
const maxReleased = 1024

// maxJobs bounds the distinct job labels: job names are the program's own
// jobs, but a name built from data would otherwise grow the series
// without end. Past it, jobs read Other.
const maxJobs = 500

// Translator turns events into Points and Spans. It keeps the state the
// measurements need (which acquisitions are held and until when, when a
// key was released, which labels have been seen) and is safe for
// concurrent use.
type Translator struct {
	keys *Keys
	jobs *Keys
	held heldSet
	now  func() time.Time

	mu       sync.Mutex
	released map[string]time.Time
	labels   map[series]struct{} // key labels seen, by kind: lease_held reads 0 for them
}

// series is a key label and a kind: the series of the keyed metrics.
type series struct{ key, kind string }

// NewTranslator returns a Translator labelling keys with keys (nil: no key
// labels) and reading the time from now (nil: time.Now).
func NewTranslator(keys *Keys, now func() time.Time) *Translator {
	if now == nil {
		now = time.Now
	}
	t := &Translator{
		keys:     keys,
		jobs:     NewKeys(func(job string) string { return job }, maxJobs),
		now:      now,
		released: make(map[string]time.Time),
		labels:   make(map[series]struct{}),
	}
	if !keys.Enabled() {
		t.labels[series{"", KindLease}] = struct{}{}
	}
	return t
}

// Keyed reports whether points carry a key label.
func (t *Translator) Keyed() bool { return t.keys.Enabled() }

// Zeros reports, to point, the series that exist from the start at 0: the
// counters with no key or job label whose label values are known in
// advance, and without key labels those of kind lease. An adapter calls
// it once, after making its instruments; the keyed and job counters of a
// label (and kind) are reported at 0 by Lease and Job, to the same point,
// when the label is first seen.
func (t *Translator) Zeros(point func(Point)) {
	zeroPoints(point, nil, "", nil)
	if !t.Keyed() {
		zeroPoints(point, new(string), KindLease, nil) // the keyed counters, without their key label
	}
}

// Held calls fn with each key label and kind seen and the number of
// acquisitions under them held now: acquired, neither released nor lost,
// and before their local deadline. Without key labels key is "". A set
// counts once, however many keys it holds. Expired acquisitions are
// forgotten.
func (t *Translator) Held(fn func(key, kind string, n int)) {
	n := t.held.Count(t.now())
	t.mu.Lock()
	labels := make([]series, 0, len(t.labels))
	for l := range t.labels {
		labels = append(labels, l)
	}
	t.mu.Unlock()
	for _, l := range labels {
		fn(l.key, l.kind, n[l])
	}
}

// about returns what i is about: its kind, and the key that names it in
// metrics, which KeyLabel maps to the key label. A permit is named by its
// semaphore's key, so that a semaphore's slots share one label; a set by
// its first key in byte order, so that the label depends on one key of
// the application's, never on a combination of them.
func about(i lease.EventInfo) (kind, key string) {
	switch {
	case i.Semaphore != "":
		return KindPermit, i.Semaphore
	case len(i.Keys) > 0:
		return KindSet, i.Keys[0]
	}
	return KindLease, i.Key
}

// keyLabel returns the key label of key, an event's key of kind, reporting
// the label's counters at 0 to point the first time the label is handed
// out for kind.
func (t *Translator) keyLabel(key, kind string, point func(Point)) string {
	l := t.keys.Label(key)
	t.mu.Lock()
	_, seen := t.labels[series{l, kind}]
	if !seen {
		t.labels[series{l, kind}] = struct{}{}
	}
	t.mu.Unlock()
	if !seen {
		zeroPoints(point, &l, kind, nil)
	}
	return l
}

// Lease reports e's measurements to point and, if span is not nil, its
// span.
func (t *Translator) Lease(e lease.Event, point func(Point), span func(Span)) {
	i := e.Info()
	now := t.now()
	out := Outcome(i.Err)
	kind, named := about(i)
	key := t.keyLabel(named, kind, point)
	p := func(m Metric, v float64) { point(Point{Metric: m, Value: v, Key: key, Kind: kind, Outcome: out}) }
	// A permit is handed over by its semaphore: a waiter gets the lowest
	// free slot, not necessarily the one released.
	handover := i.Key
	if kind == KindPermit {
		handover = i.Semaphore
	}
	op := ""
	var s Span
	switch e := e.(type) {
	case *lease.Acquired:
		op = "acquire"
		p(Acquisitions, 1)
		p(AcquireAttempts, float64(e.Attempts))
		p(AcquireWait, e.Waited.Seconds())
		t.held.Acquire(i.Key, i.Token, series{key, kind}, now.Add(e.Remaining), now)
		t.mu.Lock()
		at, ok := t.released[handover]
		delete(t.released, handover)
		t.mu.Unlock()
		if ok {
			point(Point{Metric: Handover, Value: now.Sub(at).Seconds()})
		}
		s = Span{Name: "lease.acquire", Start: now.Add(-e.Waited)}
		if span != nil {
			s.Ints = map[string]int64{"lease.acquire.attempts": int64(e.Attempts)}
		}
	case *lease.AcquireFailed:
		op = "acquire"
		p(Acquisitions, 1)
		p(AcquireAttempts, float64(e.Attempts))
		p(AcquireWait, e.Waited.Seconds())
		s = Span{Name: "lease.acquire", Start: now.Add(-e.Waited)}
		if span != nil {
			s.Ints = map[string]int64{"lease.acquire.attempts": int64(e.Attempts)}
		}
	case *lease.Renewed:
		op = "renew"
		p(Renewals, 1)
		t.held.Renew(i.Key, i.Token, now.Add(e.Remaining), now)
		s = Span{Name: "lease.renew", Start: now.Add(-i.Latency)}
	case *lease.RenewFailed:
		op = "renew"
		p(Renewals, 1)
		s = Span{Name: "lease.renew", Start: now.Add(-i.Latency)}
	case *lease.Lost:
		point(Point{Metric: Losses, Value: 1, Key: key, Kind: kind, Reason: LostReason(i.Err)})
		t.held.End(i.Key, i.Token)
		s = Span{Name: "lease.lost", Start: now}
	case *lease.Released, *lease.ReleaseFailed:
		op = "release"
		p(Releases, 1)
		if t.held.End(i.Key, i.Token) && i.Err == nil {
			t.mu.Lock()
			if len(t.released) >= maxReleased {
				for k := range t.released { // forget one: the map stays bounded
					delete(t.released, k)
					break
				}
			}
			t.released[handover] = now
			t.mu.Unlock()
		}
		s = Span{Name: "lease.release", Start: now.Add(-i.Latency)}
	default:
		return
	}
	if op != "" {
		if i.Latency > 0 {
			point(Point{Metric: BackendRequest, Value: i.Latency.Seconds(), Operation: op, Outcome: out})
		}
		if out == Unknown {
			point(Point{Metric: UnknownOutcomes, Value: 1, Operation: op})
		}
	}
	if span != nil {
		s.End, s.Key, s.Kind, s.Token, s.Err, s.Outcome = now, i.Key, kind, i.Token, i.Err, out
		span(s)
	}
}

// Job reports e's measurements to point and, if span is not nil, its
// span: one lease.job.run span per run that started. A job's runs are
// reported at 0 the first time it is seen (Added, or its first run).
func (t *Translator) Job(e jobevent.Event, point func(Point), span func(Span)) {
	i := e.Info()
	job, fresh := t.jobs.Fresh(i.Job)
	if fresh {
		zeroPoints(point, nil, "", &job)
	}
	switch e := e.(type) {
	case *jobevent.Ran:
		result := e.Result.String()
		point(Point{Metric: JobRuns, Value: 1, Job: job, Result: result})
		if e.Result == jobevent.OK {
			point(Point{Metric: JobLastSuccess, Value: float64(e.End.UnixNano()) / 1e9, Job: job})
		}
		if span != nil {
			span(Span{Name: "lease.job.run", Start: e.Start, End: e.End, Job: i.Job, Token: i.Token, Err: i.Err, Outcome: result})
		}
	case *jobevent.NotRun:
		point(Point{Metric: JobRuns, Value: 1, Job: job, Result: e.Result.String()})
	}
}

// Cache reports e's measurements to point and, if span is not nil, its
// span.
func (t *Translator) Cache(e cacheevent.Event, point func(Point), span func(Span)) {
	i := e.Info()
	now := t.now()
	out := Outcome(i.Err)
	p := func(m Metric, v float64, outcome string) { point(Point{Metric: m, Value: v, Outcome: outcome}) }
	name := ""
	var ints map[string]int64
	switch e := e.(type) {
	case *cacheevent.Served:
		p(CacheGets, 1, e.Outcome.String())
		p(CacheGetDuration, i.Latency.Seconds(), e.Outcome.String())
		name, out = "lease.cache.get", e.Outcome.String()
	case *cacheevent.GetFailed:
		p(CacheGets, 1, out)
		p(CacheGetDuration, i.Latency.Seconds(), out)
		name = "lease.cache.get"
	case *cacheevent.Refreshed, *cacheevent.RefreshFailed:
		p(CacheRefreshes, 1, out)
		point(Point{Metric: CacheRefreshDuration, Value: i.Latency.Seconds()})
		name = "lease.cache.refresh"
	case *cacheevent.Published:
		p(CachePublications, 1, out)
		name = "lease.cache.publish"
		if span != nil {
			ints = map[string]int64{"lease.cache.size": int64(e.Size)}
		}
	case *cacheevent.PublishRefused:
		p(CachePublications, 1, out)
		name = "lease.cache.publish"
	case *cacheevent.Invalidated:
		p(CacheInvalidations, 1, out)
		name = "lease.cache.invalidate"
	default:
		return
	}
	if span != nil {
		span(Span{Name: name, Start: now.Add(-i.Latency), End: now, Key: i.Key, Token: i.Token, Err: i.Err, Outcome: out, Ints: ints})
	}
}

// Queue reports e's measurements to point and, if span is not nil, its
// span.
func (t *Translator) Queue(e queueevent.Event, point func(Point), span func(Span)) {
	i := e.Info()
	now := t.now()
	out := Outcome(i.Err)
	name := ""
	var (
		ints   map[string]int64
		floats map[string]float64
	)
	switch e := e.(type) {
	case *queueevent.Claimed:
		point(Point{Metric: QueueClaims, Value: 1, Outcome: out})
		name = "lease.queue.claim"
		if span != nil {
			ints = map[string]int64{"lease.queue.attempt": int64(e.Attempt)}
		}
		if i.Err == nil {
			point(Point{Metric: QueueClaimAttempt, Value: float64(e.Attempt)})
			point(Point{Metric: QueueClaimAge, Value: e.Age.Seconds()})
			if span != nil {
				floats = map[string]float64{"lease.queue.claim.age": e.Age.Seconds()}
			}
		}
	case *queueevent.Completed:
		point(Point{Metric: QueueCompletions, Value: 1, Outcome: out})
		name = "lease.queue.complete"
		if span != nil {
			ints = map[string]int64{"lease.queue.attempt": int64(e.Attempt)}
		}
	case *queueevent.Failed:
		switch {
		case i.Err != nil:
		case e.Dead:
			point(Point{Metric: QueueDeadLetters, Value: 1})
		default:
			point(Point{Metric: QueueRetries, Value: 1})
		}
		name = "lease.queue.fail"
		if span != nil {
			ints = map[string]int64{"lease.queue.attempt": int64(e.Attempt)}
		}
	case *queueevent.Lost:
		point(Point{Metric: QueueLosses, Value: 1, Reason: LostReason(i.Err)})
		name = "lease.queue.lost"
	case *queueevent.Pruned:
		point(Point{Metric: QueuePrunes, Value: 1, Outcome: out})
		point(Point{Metric: QueuePrunedItems, Value: float64(e.Removed)})
		name = "lease.queue.prune"
		if span != nil {
			ints = map[string]int64{"lease.queue.removed": int64(e.Removed)}
		}
	default:
		return
	}
	if span != nil {
		span(Span{Name: name, Start: now.Add(-i.Latency), End: now, Key: i.Key, Token: i.Token, Err: i.Err, Outcome: out, Ints: ints, Floats: floats})
	}
}
