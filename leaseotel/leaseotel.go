// Package leaseotel turns the events of packages lease, cache, leasequeue
// and leasescheduler into OpenTelemetry metrics and spans, on the
// go.opentelemetry.io/otel metric and trace APIs. Only programs that import
// it link those modules; the SDK and exporters are the program's choice. It
// links no store's client and no scheduler: it reads the events of cache,
// leasequeue and leasescheduler from their leaves cacheevent, queueevent
// and jobevent, so a program on PostgreSQL alone links no valkey-go by
// importing it, and one on Valkey alone no pgx.
//
//	tel, err := leaseotel.New(leaseotel.Options{}) // the global providers
//	if err != nil {
//		return err
//	}
//	client, err := lease.NewClient(store, lease.ClientOptions{Owner: owner, Observer: tel.Lease()})
//	c, err := cache.New(vk, cache.Options{Observer: tel.Cache()})
//
// # Metrics
//
// Instrument names follow the OpenTelemetry naming conventions (dotted,
// lower case, units as UCUM: "s" for durations, "{lease}" for counts), and
// attributes are namespaced "lease.*":
//
//	lease.held                      up-down counter  leases, permits and sets this process holds now, observed at collection [lease.key, lease.kind]
//	lease.acquisitions              counter          Acquire, AcquirePermit and AcquireSet calls (and Try…) [lease.key, lease.kind, lease.outcome]
//	lease.acquire.attempts          counter          backend acquire attempts those calls made [lease.key, lease.kind]
//	lease.acquire.wait.duration     histogram, s     from such a call to its end, waiting included [lease.kind, lease.outcome]
//	lease.backend.request.duration  histogram, s     one backend request, waiting excluded [lease.operation, lease.outcome]
//	lease.renewals                  counter          renewals [lease.key, lease.kind, lease.outcome]
//	lease.losses                    counter          leases, permits and sets lost [lease.key, lease.kind, lease.lost.reason]
//	lease.releases                  counter          releases [lease.key, lease.kind, lease.outcome]
//	lease.unknown_outcomes          counter          requests whose outcome is unknown [lease.operation]
//	lease.handover.duration         histogram, s     from a release to the next grant of the key in this process
//	lease.cache.gets                counter          cache Gets: hit, loaded, shared, stale, or an error outcome [lease.outcome]
//	lease.cache.get.duration        histogram, s     cache Gets [lease.outcome]
//	lease.cache.refreshes           counter          load-and-publish runs [lease.outcome]
//	lease.cache.refresh.duration    histogram, s     load and publication
//	lease.cache.publications        counter          publications [lease.outcome]
//	lease.cache.invalidations       counter          invalidations [lease.outcome]
//	lease.queue.claims              counter          claims taken (ok) or failed [lease.outcome]
//	lease.queue.claim.attempt       histogram        the attempt number of each claim taken
//	lease.queue.claim.age           histogram, s     how long each item taken had been ready (enqueued, or its retry delay over)
//	lease.queue.completions         counter          fenced completions [lease.outcome]
//	lease.queue.retries             counter          failed attempts to be retried
//	lease.queue.dead_letters        counter          items moved to the dead-letter state
//	lease.queue.losses              counter          item and partition leases lost [lease.lost.reason]
//	lease.queue.prunes              counter          background prunes of the source's finished items [lease.outcome]
//	lease.queue.pruned_items        counter          finished items those prunes removed
//	lease.job.runs                  counter          scheduled runs of a job [lease.job.name, lease.job.result]
//	lease.job.last_success          gauge, s         when a run of the job last ended ok, Unix seconds [lease.job.name]
//
// They are the metrics of package leaseprom under OpenTelemetry names, with
// the same kind (lease, permit, set), outcome, reason and result values
// (see leaseprom's documentation), built from one table so the two cannot
// drift. As there,
// lease.held is counted at each collection, so a lease that ended by
// expiry (its local deadline passed without a renewal, release or loss)
// has left it, and counters whose label values are known in advance start
// at 0.
//
// # Cardinality
//
// Metrics carry no lease.key attribute unless Options.KeyAttribute is set,
// and then at most Options.MaxKeyValues distinct values (100 by default),
// the rest reading "other". As in leaseprom, a permit is labelled by
// KeyAttribute of its semaphore's key and a set by KeyAttribute of its
// first key in byte order, so a semaphore's slots and the many sets of a
// few keys make no more values than their keys. lease.job.name is the name of one of the
// program's own jobs, a set the program bounds. Spans always carry
// lease.token, and lease.key (lease.job.name for a job's run): spans are
// sampled one by one, not aggregated.
//
// # Spans
//
// Each event that reports an operation becomes one span, with the
// operation's own start and end times: lease.acquire (the whole Acquire
// call, waiting included, with lease.acquire.attempts), lease.renew,
// lease.release, lease.lost (an instant), lease.cache.get,
// lease.cache.refresh, lease.cache.publish, lease.cache.invalidate,
// lease.queue.claim (with lease.queue.attempt, and lease.queue.claim.age
// in seconds when taken), lease.queue.complete, lease.queue.fail,
// lease.queue.lost, lease.queue.prune (with lease.queue.removed, the
// items it removed) and lease.job.run (a scheduled run that started, from
// its lease to its end, with lease.job.name and lease.token; lease.outcome
// is its result). A failed operation's span has status Error and records
// the error. The spans of package lease also carry lease.kind, and
// lease.key is then the permit key of a permit (semaphore/permit/N) and
// the keys of a set joined by ",". Events carry no context, so these spans
// are roots of their own traces: link them to a request through lease.key
// and lease.token.
package leaseotel

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/golib/lease/cache/cacheevent"
	"github.com/golib/lease/internal/telemetry"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue/queueevent"
	"github.com/golib/lease/leasescheduler/jobevent"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/golib/lease/leaseotel"

// Options configures Telemetry. The zero value uses the global providers.
type Options struct {
	// MeterProvider makes the meter. Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes the tracer. Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// KeyAttribute, if set, adds a lease.key attribute to the metrics
	// marked [lease.key] in the package documentation, whose value is
	// KeyAttribute(key). Default nil: none.
	KeyAttribute func(key string) string
	// MaxKeyValues bounds the distinct lease.key values on metrics; values
	// past it read "other". Default 100. Ignored without KeyAttribute.
	MaxKeyValues int
}

// Telemetry turns events into OpenTelemetry metrics and spans. Hand
// [Telemetry.Lease], [Telemetry.Cache], [Telemetry.Queue] and
// [Telemetry.Jobs] to the packages whose events it should record. Safe for
// concurrent use.
type Telemetry struct {
	t      *telemetry.Translator
	tracer trace.Tracer
	counts [len(telemetry.Specs)]metric.Int64Counter
	gauges [len(telemetry.Specs)]metric.Float64Gauge
	histos [len(telemetry.Specs)]metric.Float64Histogram
}

// New returns Telemetry configured by o, with its instruments created; it
// fails only if the meter refuses an instrument.
func New(o Options) (*Telemetry, error) {
	mp, tp := o.MeterProvider, o.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	meter := mp.Meter(ScopeName)
	t := &Telemetry{
		t:      telemetry.NewTranslator(telemetry.NewKeys(o.KeyAttribute, o.MaxKeyValues), nil),
		tracer: tp.Tracer(ScopeName),
	}
	for i, spec := range telemetry.Specs {
		var err error
		switch spec.Kind {
		case telemetry.Counter:
			t.counts[i], err = meter.Int64Counter(spec.OTel, metric.WithDescription(spec.Help), metric.WithUnit(spec.Unit))
		case telemetry.Current:
			// lease.held is counted at each collection, so that a lease
			// that ended by expiry, which no event reports, has left it.
			_, err = meter.Int64ObservableUpDownCounter(spec.OTel, metric.WithDescription(spec.Help), metric.WithUnit(spec.Unit),
				metric.WithInt64Callback(t.observeHeld))
		case telemetry.Gauge:
			t.gauges[i], err = meter.Float64Gauge(spec.OTel, metric.WithDescription(spec.Help), metric.WithUnit(spec.Unit))
		case telemetry.Histogram:
			opts := []metric.Float64HistogramOption{metric.WithDescription(spec.Help), metric.WithUnit(spec.Unit)}
			if spec.Unit == "s" {
				opts = append(opts, metric.WithExplicitBucketBoundaries(telemetry.SecondBuckets...))
			}
			t.histos[i], err = meter.Float64Histogram(spec.OTel, opts...)
		}
		if err != nil {
			return nil, err
		}
	}
	t.t.Zeros(t.record)
	return t, nil
}

// observeHeld reports lease.held.
func (t *Telemetry) observeHeld(_ context.Context, o metric.Int64Observer) error {
	t.t.Held(func(key, kind string, n int) {
		o.Observe(int64(n), metric.WithAttributes(t.attributes(telemetry.Point{Metric: telemetry.Held, Key: key, Kind: kind})...))
	})
	return nil
}

// Lease returns the observer for lease.ClientOptions.Observer.
func (t *Telemetry) Lease() lease.Observer {
	return lease.ObserverFunc(func(e lease.Event) { t.t.Lease(e, t.record, t.span) })
}

// Cache returns the observer for cache.Options.Observer (cache.Observer
// is cacheevent.Observer).
func (t *Telemetry) Cache() cacheevent.Observer {
	return cacheevent.ObserverFunc(func(e cacheevent.Event) { t.t.Cache(e, t.record, t.span) })
}

// Queue returns the observer for the leasequeue options' Observer
// (leasequeue.Observer is queueevent.Observer).
func (t *Telemetry) Queue() queueevent.Observer {
	return queueevent.ObserverFunc(func(e queueevent.Event) { t.t.Queue(e, t.record, t.span) })
}

// Jobs returns the observer for the Observer of leasescheduler.Options and
// leasescheduler.ElectorOptions.
func (t *Telemetry) Jobs() jobevent.Observer {
	return jobevent.ObserverFunc(func(e jobevent.Event) { t.t.Job(e, t.record, t.span) })
}

func (t *Telemetry) record(p telemetry.Point) {
	if p.Zero && telemetry.Specs[p.Metric].Kind == telemetry.Histogram {
		return // OpenTelemetry makes no histogram point without a measurement
	}
	ctx, set := context.Background(), metric.WithAttributes(t.attributes(p)...)
	switch telemetry.Specs[p.Metric].Kind {
	case telemetry.Counter:
		t.counts[p.Metric].Add(ctx, int64(p.Value), set)
	case telemetry.Gauge:
		t.gauges[p.Metric].Record(ctx, p.Value, set)
	case telemetry.Histogram:
		t.histos[p.Metric].Record(ctx, p.Value, set)
	}
}

// attributes returns p's attributes, those its metric's Spec lists.
func (t *Telemetry) attributes(p telemetry.Point) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 3)
	for _, l := range telemetry.Specs[p.Metric].Labels {
		switch l {
		case telemetry.KeyLabel:
			if t.t.Keyed() {
				attrs = append(attrs, attribute.String("lease.key", p.Key))
			}
		case telemetry.OutcomeLabel:
			attrs = append(attrs, attribute.String("lease.outcome", p.Outcome))
		case telemetry.ReasonLabel:
			attrs = append(attrs, attribute.String("lease.lost.reason", p.Reason))
		case telemetry.OperationLabel:
			attrs = append(attrs, attribute.String("lease.operation", p.Operation))
		case telemetry.JobLabel:
			attrs = append(attrs, attribute.String("lease.job.name", p.Job))
		case telemetry.ResultLabel:
			attrs = append(attrs, attribute.String("lease.job.result", p.Result))
		case telemetry.KindLabel:
			attrs = append(attrs, attribute.String("lease.kind", p.Kind))
		}
	}
	return attrs
}

func (t *Telemetry) span(s telemetry.Span) {
	attrs := make([]attribute.KeyValue, 0, 4+len(s.Ints)+len(s.Floats))
	if strings.HasPrefix(s.Name, "lease.job.") {
		attrs = append(attrs, attribute.String("lease.job.name", s.Job))
	} else {
		attrs = append(attrs, attribute.String("lease.key", s.Key))
	}
	if s.Kind != "" {
		attrs = append(attrs, attribute.String("lease.kind", s.Kind))
	}
	attrs = append(attrs,
		attribute.Int64("lease.token", int64(s.Token)),
		attribute.String("lease.outcome", s.Outcome))
	for k, v := range s.Ints {
		attrs = append(attrs, attribute.Int64(k, v))
	}
	for k, v := range s.Floats {
		attrs = append(attrs, attribute.Float64(k, v))
	}
	_, span := t.tracer.Start(context.Background(), s.Name,
		trace.WithTimestamp(s.Start), trace.WithAttributes(attrs...))
	if s.Err != nil {
		span.RecordError(s.Err)
		span.SetStatus(codes.Error, s.Outcome)
	}
	span.End(trace.WithTimestamp(s.End))
}
