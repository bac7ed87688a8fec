package telemetry

import (
	"sync"
	"time"

	"github.com/golib/lease/cache/cacheevent"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue/queueevent"
)

// Kind is how a metric aggregates.
type Kind int

const (
	Counter   Kind = iota + 1
	Gauge          // an up-down count
	Histogram      // seconds, unless Unit says otherwise
)

// Label names a point's label. A metric carries the labels its Spec lists.
type Label int

const (
	KeyLabel Label = iota + 1 // the bounded key label, present only when key labels are on
	OutcomeLabel
	ReasonLabel
	OperationLabel
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
	numMetrics
)

// SecondBuckets are both adapters' default histogram buckets for
// durations, in seconds: 0.25 ms (a round trip on a local network) to 30 s
// (a long wait for a holder).
var SecondBuckets = []float64{.00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Specs lists every metric, indexed by Metric.
var Specs = [numMetrics]Spec{
	Held:                 {"held", "lease.held", "{lease}", Gauge, "Leases this process holds now.", []Label{KeyLabel}},
	Acquisitions:         {"acquisitions_total", "lease.acquisitions", "{call}", Counter, "Acquire and TryAcquire calls, by outcome.", []Label{KeyLabel, OutcomeLabel}},
	AcquireAttempts:      {"acquire_attempts_total", "lease.acquire.attempts", "{attempt}", Counter, "Backend acquire attempts made by Acquire and TryAcquire.", []Label{KeyLabel}},
	AcquireWait:          {"acquire_wait_seconds", "lease.acquire.wait.duration", "s", Histogram, "Time from an Acquire call to its end, waiting for a holder included.", []Label{OutcomeLabel}},
	BackendRequest:       {"backend_request_duration_seconds", "lease.backend.request.duration", "s", Histogram, "Duration of one backend request, waiting excluded.", []Label{OperationLabel, OutcomeLabel}},
	Renewals:             {"renewals_total", "lease.renewals", "{renewal}", Counter, "Renewals, by outcome.", []Label{KeyLabel, OutcomeLabel}},
	Losses:               {"losses_total", "lease.losses", "{lease}", Counter, "Leases lost, by reason.", []Label{KeyLabel, ReasonLabel}},
	Releases:             {"releases_total", "lease.releases", "{release}", Counter, "Releases, by outcome.", []Label{KeyLabel, OutcomeLabel}},
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
}

// Point is one measurement: add Value to a counter or gauge, or observe it
// in a histogram. Labels the metric does not carry are empty.
type Point struct {
	Metric    Metric
	Value     float64
	Key       string // the bounded key label; "" when key labels are off
	Outcome   string
	Reason    string
	Operation string
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
		}
	}
	return ns
}

// Span is one operation an event reports, for tracing: it ran from Start
// to End.
type Span struct {
	Name       string
	Start, End time.Time
	Key        string
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

// Translator turns events into Points and Spans. It keeps the state the
// measurements need (which acquisitions are held, when a key was released)
// and is safe for concurrent use.
type Translator struct {
	keys *Keys
	held heldSet
	now  func() time.Time

	mu       sync.Mutex
	released map[string]time.Time
}

// NewTranslator returns a Translator labelling keys with keys (nil: no key
// labels) and reading the time from now (nil: time.Now).
func NewTranslator(keys *Keys, now func() time.Time) *Translator {
	if now == nil {
		now = time.Now
	}
	return &Translator{keys: keys, now: now, released: make(map[string]time.Time)}
}

// Keyed reports whether points carry a key label.
func (t *Translator) Keyed() bool { return t.keys.Enabled() }

// Lease reports e's measurements to point and, if span is not nil, its
// span.
func (t *Translator) Lease(e lease.Event, point func(Point), span func(Span)) {
	i := e.Info()
	now := t.now()
	out := Outcome(i.Err)
	key := t.keys.Label(i.Key)
	p := func(m Metric, v float64) { point(Point{Metric: m, Value: v, Key: key, Outcome: out}) }
	op := ""
	var s Span
	switch e := e.(type) {
	case *lease.Acquired:
		op = "acquire"
		p(Acquisitions, 1)
		p(AcquireAttempts, float64(e.Attempts))
		p(AcquireWait, e.Waited.Seconds())
		if t.held.Acquire(i.Key, i.Token) {
			p(Held, 1)
		}
		t.mu.Lock()
		at, ok := t.released[i.Key]
		delete(t.released, i.Key)
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
	case *lease.Renewed, *lease.RenewFailed:
		op = "renew"
		p(Renewals, 1)
		s = Span{Name: "lease.renew", Start: now.Add(-i.Latency)}
	case *lease.Lost:
		point(Point{Metric: Losses, Value: 1, Key: key, Reason: LostReason(i.Err)})
		if t.held.End(i.Key, i.Token) {
			p(Held, -1)
		}
		s = Span{Name: "lease.lost", Start: now}
	case *lease.Released, *lease.ReleaseFailed:
		op = "release"
		p(Releases, 1)
		if t.held.End(i.Key, i.Token) {
			p(Held, -1)
			if i.Err == nil {
				t.mu.Lock()
				if len(t.released) >= maxReleased {
					for k := range t.released { // forget one: the map stays bounded
						delete(t.released, k)
						break
					}
				}
				t.released[i.Key] = now
				t.mu.Unlock()
			}
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
		s.End, s.Key, s.Token, s.Err, s.Outcome = now, i.Key, i.Token, i.Err, out
		span(s)
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
