// Package leaseprom exports the events of packages lease, cache,
// leasequeue and leasescheduler as Prometheus metrics, on
// github.com/prometheus/client_golang. Only programs that import it link
// that library. It links no store's client and no scheduler: it reads the
// events of cache, leasequeue and leasescheduler from their leaves
// cacheevent, queueevent and jobevent, so a program on PostgreSQL alone
// links no valkey-go by importing it, and one on Valkey alone no pgx.
//
// One [Metrics] serves all four packages and is registered once:
//
//	metrics := leaseprom.New(leaseprom.Options{})
//	prometheus.MustRegister(metrics)
//	client, err := lease.NewClient(store, lease.ClientOptions{Owner: owner, Observer: metrics.Lease()})
//	c, err := cache.New(vk, cache.Options{Observer: metrics.Cache()})
//	q, err := leasequeue.New(src, client, leasequeue.Options{Observer: metrics.Queue()})
//	locker, err := leasescheduler.NewLocker(client, leasescheduler.Options{Observer: metrics.Jobs()})
//
// # Metrics
//
// Every name starts with Options.Namespace ("lease" by default). Durations
// are in seconds, counters end in _total, as Prometheus' naming guide asks.
//
//	lease_held                              gauge    leases, permits and sets this process holds now: acquired, and neither released, lost nor past their local deadline [key, kind]
//	lease_acquisitions_total                counter  Acquire, AcquirePermit and AcquireSet calls (and Try…) by outcome [key, kind, outcome]
//	lease_acquire_attempts_total            counter  backend acquire attempts those calls made [key, kind]
//	lease_acquire_wait_seconds              histo    time from such a call to its end, waiting for a holder included [kind, outcome]
//	lease_backend_request_duration_seconds  histo    one backend request, waiting excluded [operation, outcome]
//	lease_renewals_total                    counter  renewals by outcome [key, kind, outcome]
//	lease_losses_total                      counter  leases, permits and sets lost, by reason [key, kind, reason]
//	lease_releases_total                    counter  releases by outcome [key, kind, outcome]
//	lease_unknown_outcomes_total            counter  requests whose outcome is unknown [operation]
//	lease_handover_seconds                  histo    from a release to the next grant of the key in this process
//	lease_cache_gets_total                  counter  cache Gets by outcome: hit, loaded, shared (waited for another load), stale, error
//	lease_cache_get_duration_seconds        histo    cache Gets [outcome]
//	lease_cache_refreshes_total             counter  load-and-publish runs by outcome
//	lease_cache_refresh_duration_seconds    histo    load and publication
//	lease_cache_publications_total          counter  publications by outcome: ok, not_current, invalidated, unknown, error
//	lease_cache_invalidations_total         counter  invalidations by outcome
//	lease_queue_claims_total                counter  claims taken (ok) or failed, by outcome
//	lease_queue_claim_attempt               histo    the attempt number of each claim taken (1 = first try)
//	lease_queue_claim_age_seconds           histo    how long each item taken had been ready (enqueued, or its retry delay over)
//	lease_queue_completions_total           counter  fenced completions by outcome (stale, lost: refused)
//	lease_queue_retries_total               counter  failed attempts that will be retried
//	lease_queue_dead_letters_total          counter  items moved to the dead-letter state
//	lease_queue_losses_total                counter  item or partition leases lost, by reason
//	lease_queue_prunes_total                counter  background prunes of the source's finished items run by this process, by outcome
//	lease_queue_pruned_items_total          counter  finished items those prunes removed (also by one that stopped early)
//	lease_job_runs_total                    counter  scheduled runs of a job on this process, by result [job_name, result]
//	lease_job_last_success_timestamp_seconds gauge   when a run of the job last ended ok on this process, Unix seconds [job_name]
//
// The kind label says what an acquisition holds: lease (Acquire), permit
// (a permit of a semaphore, AcquirePermit) or set (a set of keys,
// AcquireSet). The outcome label takes one of a fixed set of values: ok, not_acquired,
// lost, stale, not_current, invalidated, unknown (the request may or may
// not have been applied), canceled, invalid and error. The reason label is
// expired, superseded, deadline_passed, force_released, record_lost, handed_off or
// unknown; operation is acquire, renew or release; result is ok, failed,
// lost, unchecked (a plain gocron task: the job's error is not seen),
// skipped (another replica has the run) or error (the run's lease could
// not be taken), as jobevent.Result says.
//
// lease_held is counted at each scrape, not from events alone: a lease
// leaves it when it is released or lost, and also when its local deadline
// passes without a renewal (a handle dropped without Release, a
// scheduler's slot lease left to expire), and the process forgets it. A
// permit counts as one under its semaphore's key label, so
// lease_held{kind="permit"} by key is the number of a semaphore's permits
// this process holds; a set counts once, however many keys it holds.
//
// The counters whose label values are known in advance exist from the
// start at 0, as client_golang users expect, so that rate() and increase()
// see their first event: lease_losses_total and lease_queue_losses_total
// for every reason, lease_unknown_outcomes_total for every operation, the
// outcomes that renewals, releases, acquisitions, publications,
// completions and prunes can have, the counters without labels, and the
// histograms that alerts take a rate() of. Those with a key label start
// when the key label is first seen, and a job's when the job is added (by
// Locker.Job, Locker.CronJob or Elector.Job) or first run.
// lease_job_last_success_timestamp_seconds has no series until a success.
//
// docs/lease.rules.yml in the module's repository holds alerting rules on
// these metrics, each tested to fire and clear on a real run.
//
// # Cardinality
//
// No metric has a key label unless Options.KeyLabel is set: keys are user
// data and can be unbounded (one per queue item, one per cache entry). With
// KeyLabel set, the key label of the lease_* metrics is KeyLabel(key), and
// at most Options.MaxKeyLabels distinct values (100 by default) are handed
// out; every further one reads "other". KeyLabel sees only keys the
// program chose: for a permit, its semaphore's key (not the permit key
// semaphore/permit/N, so a semaphore's slots share one label), and for a
// set, its first key in byte order (not the set's keys joined, so that
// distinct sets of the same keys do not each make a label). Cache, queue and job metrics never
// carry keys. The job_name label is the name of one of the program's own
// jobs, a set the program bounds (at most 500 values, the rest reading
// "other"). Every other label has a fixed set of values.
//
// lease_handover_seconds sees only what this process sees: a release and
// the next grant of the same key by clients that share this Metrics. Across
// processes, the waiting contender's lease_acquire_wait_seconds shows the
// same hand-over from the other side.
package leaseprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/golib/lease/cache/cacheevent"
	"github.com/golib/lease/internal/telemetry"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue/queueevent"
	"github.com/golib/lease/leasescheduler/jobevent"
)

// Options configures Metrics. The zero value is ready to use.
type Options struct {
	// Namespace is the first part of every metric name. Default "lease".
	Namespace string
	// ConstLabels are added to every metric, e.g. {"service": "billing"}.
	ConstLabels prometheus.Labels
	// KeyLabel, if set, adds a "key" label to the lease metrics marked
	// [key] in the package documentation (held, acquisitions, acquire
	// attempts, renewals, losses, releases), whose value is KeyLabel(key):
	// a prefix, a job name, the key itself for a known small set of keys.
	// key is a lease's key, a permit's semaphore key, or a set's first key
	// (see Cardinality). Cache and queue metrics never carry it. Default
	// nil: no key label at all.
	KeyLabel func(key string) string
	// MaxKeyLabels bounds the distinct values of the key label; values
	// past it read "other". Default 100. Ignored without KeyLabel.
	MaxKeyLabels int
	// Buckets are the duration histograms' buckets in seconds. Default:
	// 0.25 ms to 30 s, for round trips on a local network up to waits for
	// a holder.
	Buckets []float64
}

var (
	countBuckets = []float64{1, 2, 3, 5, 10, 25}
)

// Metrics turns events into Prometheus metrics. It is a
// prometheus.Collector: register it once, and hand [Metrics.Lease],
// [Metrics.Cache], [Metrics.Queue] and [Metrics.Jobs] to the packages whose
// events it should count. Safe for concurrent use.
type Metrics struct {
	t     *telemetry.Translator
	keyed bool
	vecs  [len(telemetry.Specs)]prometheus.Collector
	held  *prometheus.Desc // lease_held, computed at each collection
}

// New returns Metrics configured by o.
func New(o Options) *Metrics {
	ns := o.Namespace
	if ns == "" {
		ns = "lease"
	}
	buckets := o.Buckets
	if len(buckets) == 0 {
		buckets = telemetry.SecondBuckets
	}
	t := telemetry.NewTranslator(telemetry.NewKeys(o.KeyLabel, o.MaxKeyLabels), nil)
	m := &Metrics{t: t, keyed: t.Keyed()}
	for i, spec := range telemetry.Specs {
		labels := telemetry.Names(telemetry.Metric(i), m.keyed)
		switch spec.Kind {
		case telemetry.Counter:
			m.vecs[i] = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: spec.Prom, Help: spec.Help, ConstLabels: o.ConstLabels}, labels)
		case telemetry.Current:
			m.held = prometheus.NewDesc(prometheus.BuildFQName(ns, "", spec.Prom), spec.Help, labels, o.ConstLabels)
		case telemetry.Gauge:
			m.vecs[i] = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: spec.Prom, Help: spec.Help, ConstLabels: o.ConstLabels}, labels)
		case telemetry.Histogram:
			b := buckets
			if spec.Unit != "s" {
				b = countBuckets
			}
			m.vecs[i] = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: spec.Prom, Help: spec.Help, ConstLabels: o.ConstLabels, Buckets: b}, labels)
		}
	}
	t.Zeros(m.record)
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.held
	for _, c := range m.vecs {
		if c != nil {
			c.Describe(ch)
		}
	}
}

// Collect implements prometheus.Collector. lease_held is counted at each
// collection, so that a lease that ended by expiry, which no event
// reports, has left it.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.t.Held(func(key, kind string, n int) {
		p := telemetry.Point{Metric: telemetry.Held, Key: key, Kind: kind}
		ch <- prometheus.MustNewConstMetric(m.held, prometheus.GaugeValue, float64(n), p.Values(m.keyed)...)
	})
	for _, c := range m.vecs {
		if c != nil {
			c.Collect(ch)
		}
	}
}

// Lease returns the observer for lease.ClientOptions.Observer.
func (m *Metrics) Lease() lease.Observer {
	return lease.ObserverFunc(func(e lease.Event) { m.t.Lease(e, m.record, nil) })
}

// Cache returns the observer for cache.Options.Observer (cache.Observer
// is cacheevent.Observer).
func (m *Metrics) Cache() cacheevent.Observer {
	return cacheevent.ObserverFunc(func(e cacheevent.Event) { m.t.Cache(e, m.record, nil) })
}

// Queue returns the observer for the leasequeue options' Observer
// (leasequeue.Observer is queueevent.Observer).
func (m *Metrics) Queue() queueevent.Observer {
	return queueevent.ObserverFunc(func(e queueevent.Event) { m.t.Queue(e, m.record, nil) })
}

// Jobs returns the observer for the Observer of leasescheduler.Options and
// leasescheduler.ElectorOptions.
func (m *Metrics) Jobs() jobevent.Observer {
	return jobevent.ObserverFunc(func(e jobevent.Event) { m.t.Job(e, m.record, nil) })
}

func (m *Metrics) record(p telemetry.Point) {
	vs := p.Values(m.keyed)
	switch v := m.vecs[p.Metric].(type) {
	case *prometheus.CounterVec:
		v.WithLabelValues(vs...).Add(p.Value)
	case *prometheus.GaugeVec:
		v.WithLabelValues(vs...).Set(p.Value)
	case *prometheus.HistogramVec:
		h := v.WithLabelValues(vs...)
		if !p.Zero {
			h.Observe(p.Value)
		}
	}
}
