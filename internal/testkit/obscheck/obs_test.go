package obscheck

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	valkey "github.com/valkey-io/valkey-go"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/cache"
	"github.com/golib/lease/internal/testkit/promtest"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseotel"
	"github.com/golib/lease/leaseprom"
	"github.com/golib/lease/leasequeue"
)

func TestMain(m *testing.M) {
	code := testserver.MainLeakChecked(m)
	if code == 0 {
		code = checkAlertsExercised()
	}
	os.Exit(code)
}

// rig is one process's observability: both adapters on every event.
type rig struct {
	metrics *leaseprom.Metrics
	scrape  *httptest.Server
	reader  *sdkmetric.ManualReader
	spans   *tracetest.InMemoryExporter
	tel     *leaseotel.Telemetry
}

func newRig(t *testing.T) *rig {
	t.Helper()
	return newLabelledRig(t, func(k string) string { return k })
}

// newLabelledRig is newRig with keyLabel as both adapters' key label.
func newLabelledRig(t *testing.T, keyLabel func(string) string) *rig {
	t.Helper()
	r := &rig{metrics: leaseprom.New(leaseprom.Options{KeyLabel: keyLabel})}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(r.metrics)
	r.scrape = httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	t.Cleanup(r.scrape.Close)

	r.reader = sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	r.spans = tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
	tel, err := leaseotel.New(leaseotel.Options{MeterProvider: mp, TracerProvider: tp, KeyAttribute: keyLabel})
	if err != nil {
		t.Fatal(err)
	}
	r.tel = tel
	return r
}

func (r *rig) leaseObserver() lease.Observer {
	return lease.MultiObserver(r.metrics.Lease(), r.tel.Lease())
}

// sharedClient returns a client of the shared Valkey server and a lease
// client on it that reports to r, under a prefix of the test's own.
func (r *rig) sharedClient(t *testing.T) (valkey.Client, *lease.Client, string) {
	t.Helper()
	vk := dial(t, testserver.Valkey(t).Addr())
	prefix := fmt.Sprintf("obs%d:", time.Now().UnixNano())
	store, err := leasevalkey.New(vk, leasevalkey.Options{Prefix: prefix + "lease:"})
	if err != nil {
		t.Fatal(err)
	}
	client, err := lease.NewClient(store, lease.ClientOptions{Owner: "obs", Observer: r.leaseObserver()})
	if err != nil {
		t.Fatal(err)
	}
	return vk, client, prefix
}

// prom scrapes the rig's endpoint over HTTP and returns the value of the
// series of name whose labels include labels ("k=v"), summed: a counter's
// or gauge's value, a histogram's sample count.
func (r *rig) prom(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(r.scrape.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return promtest.Sum(fams, name, labels...)
}

// otel collects the rig's OpenTelemetry metrics and returns the sum of the
// data points of name whose attributes include attrs ("k=v").
func (r *rig) otel(t *testing.T, name string, attrs ...string) float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	has := func(set attribute.Set) bool {
		for _, a := range attrs {
			k, v, _ := strings.Cut(a, "=")
			if got, ok := set.Value(attribute.Key(k)); !ok || got.String() != v {
				return false
			}
		}
		return true
	}
	var sum float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if has(p.Attributes) {
						sum += float64(p.Value)
					}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					if has(p.Attributes) {
						sum += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if has(p.Attributes) {
						sum += float64(p.Count)
					}
				}
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
		}
	}
	return sum
}

// spanCount counts the ended spans named name whose status is error when
// failed is true, unset otherwise.
func (r *rig) spanCount(name string, failed bool) int {
	n := 0
	for _, s := range r.spans.GetSpans() {
		if s.Name == name && (s.Status.Code.String() == "Error") == failed {
			n++
		}
	}
	return n
}

func want(t *testing.T, what string, got, want float64) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func dial(t *testing.T, addr string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestLeaseHeldAndLostOnPausedServer holds a lease on a dedicated server,
// pauses the server past the lease's TTL, and checks that both adapters
// saw the lease held, then lost with the local deadline passed.
func TestLeaseHeldAndLostOnPausedServer(t *testing.T) {
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	r := newRig(t)
	store, err := leasevalkey.New(dial(t, srv.Addr()), leasevalkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := lease.NewClient(store, lease.ClientOptions{Owner: "obs", Observer: r.leaseObserver()})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := client.TryAcquire(ctx, "obs/held", policy)
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.StartManaged(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "lease_held{key=obs/held}", r.prom(t, "lease_held", "key=obs/held"), 1)
	want(t, "lease.held", r.otel(t, "lease.held", "lease.key=obs/held"), 1)

	// Pause only once a renewal went through, so the run shows both.
	for r.prom(t, "lease_renewals_total", "outcome=ok") == 0 {
		select {
		case <-m.Lost():
			t.Fatalf("lost before the pause: %v", m.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	srv.Pause()
	select {
	case <-m.Lost():
	case <-ctx.Done():
		srv.Resume()
		t.Fatal("no loss reported while the server was paused")
	}
	srv.Resume()
	if err := m.Stop(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Stop = %v, want ErrLost", err)
	}
	want(t, "lease_held", r.prom(t, "lease_held"), 0)
	want(t, "lease_losses_total{reason=deadline_passed}", r.prom(t, "lease_losses_total", "key=obs/held", "reason=deadline_passed"), 1)
	want(t, "lease_acquisitions_total{outcome=ok}", r.prom(t, "lease_acquisitions_total", "outcome=ok"), 1)
	want(t, "lease.held after the loss", r.otel(t, "lease.held"), 0)
	want(t, "lease.losses", r.otel(t, "lease.losses", "lease.lost.reason=deadline_passed"), 1)
	if n := r.spanCount("lease.lost", true); n != 1 {
		t.Errorf("%d lease.lost spans, want 1", n)
	}
	if n := r.spanCount("lease.acquire", false); n != 1 {
		t.Errorf("%d lease.acquire spans, want 1", n)
	}
}

// TestCacheStampede runs 20 concurrent Gets of one missing entry with a
// slow load: one load, its publication, and 19 Gets served its result.
func TestCacheStampede(t *testing.T) {
	r := newRig(t)
	vk, client, prefix := r.sharedClient(t)
	c, err := cache.New(vk, client, cache.Options{TTL: time.Minute, Prefix: prefix + "cache:", Observer: cache.ObserverFunc(func(e cache.Event) { r.metrics.Cache().Observe(e); r.tel.Cache().Observe(e) })})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var loads atomic.Int32
	load := func(ctx context.Context, _ lease.Token) ([]byte, error) {
		loads.Add(1)
		time.Sleep(200 * time.Millisecond)
		return []byte("report"), nil
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, _, err := c.Get(ctx, "report", load); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	want(t, "loads", float64(loads.Load()), 1)
	want(t, "lease_cache_gets_total{outcome=loaded}", r.prom(t, "lease_cache_gets_total", "outcome=loaded"), 1)
	want(t, "lease_cache_gets_total{outcome=shared}", r.prom(t, "lease_cache_gets_total", "outcome=shared"), 19)
	want(t, "lease_cache_refreshes_total{outcome=ok}", r.prom(t, "lease_cache_refreshes_total", "outcome=ok"), 1)
	want(t, "lease_cache_publications_total{outcome=ok}", r.prom(t, "lease_cache_publications_total", "outcome=ok"), 1)
	want(t, "lease.cache.gets{shared}", r.otel(t, "lease.cache.gets", "lease.outcome=shared"), 19)
	if _, info, err := c.Get(ctx, "report", load); err != nil || info.Outcome != cache.Hit {
		t.Fatalf("Get after the stampede = %v, %v; want a hit", info.Outcome, err)
	}
	want(t, "lease_cache_gets_total{outcome=hit}", r.prom(t, "lease_cache_gets_total", "outcome=hit"), 1)
	if n := r.spanCount("lease.cache.refresh", false); n != 1 {
		t.Errorf("%d lease.cache.refresh spans, want 1", n)
	}
}

// TestQueueWork runs a queue on the Valkey source over ten items, one of
// which fails once, and checks claims, completions and the retry.
func TestQueueWork(t *testing.T) {
	r := newRig(t)
	vk, client, prefix := r.sharedClient(t)
	src, err := leasequeue.NewValkeySource(vk, "jobs", leasequeue.ValkeyOptions{Prefix: prefix + "q:"})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	q, err := leasequeue.New(client, src, leasequeue.Options{
		Name: "jobs", Policy: policy, Concurrency: 2, PollEvery: 20 * time.Millisecond,
		RetryDelay: func(int) time.Duration { return 10 * time.Millisecond },
		Observer:   leasequeue.MultiObserver(r.metrics.Queue(), r.tel.Queue()),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = fmt.Sprint("item-", i)
	}
	start := time.Now()
	if _, err := src.Enqueue(ctx, ids...); err != nil {
		t.Fatal(err)
	}
	var done atomic.Int32
	var failedOnce atomic.Bool
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		errc <- q.Run(runCtx, func(ctx context.Context, c *leasequeue.Claim) error {
			if c.ID() == "item-3" && failedOnce.CompareAndSwap(false, true) {
				return errors.New("transient")
			}
			if done.Add(1) == int32(len(ids)) {
				defer stop()
			}
			return nil
		})
	}()
	<-runCtx.Done()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the queue did not finish: %d of %d done", done.Load(), len(ids))
	}
	want(t, "lease_queue_claims_total{outcome=ok}", r.prom(t, "lease_queue_claims_total", "outcome=ok"), 11)
	want(t, "lease_queue_completions_total{outcome=ok}", r.prom(t, "lease_queue_completions_total", "outcome=ok"), 10)
	want(t, "lease_queue_retries_total", r.prom(t, "lease_queue_retries_total"), 1)
	want(t, "lease_queue_dead_letters_total", r.prom(t, "lease_queue_dead_letters_total"), 0)
	want(t, "lease.queue.completions", r.otel(t, "lease.queue.completions", "lease.outcome=ok"), 10)
	if n := r.spanCount("lease.queue.complete", false); n != 10 {
		t.Errorf("%d lease.queue.complete spans, want 10", n)
	}
	// Every claim taken has an age, which the server measured within the
	// run (a second allowed for the server's clock).
	want(t, "lease_queue_claim_age_seconds samples", r.prom(t, "lease_queue_claim_age_seconds"), 11)
	want(t, "lease.queue.claim.age samples", r.otel(t, "lease.queue.claim.age"), 11)
	most := time.Since(start) + time.Second
	ages := 0
	for _, sp := range r.spans.GetSpans() {
		for _, a := range sp.Attributes {
			if sp.Name != "lease.queue.claim" || a.Key != "lease.queue.claim.age" {
				continue
			}
			ages++
			if age := time.Duration(a.Value.AsFloat64() * float64(time.Second)); age < 0 || age > most {
				t.Errorf("a lease.queue.claim span has age %v; want between 0 and %v", age, most)
			}
		}
	}
	if ages != 11 {
		t.Errorf("%d lease.queue.claim spans with lease.queue.claim.age, want 11", ages)
	}
}

// TestQueuePrunes runs a queue on the Valkey source whose done items are
// kept a nanosecond, so that Run's background prunes remove each item
// once it is done, and checks that both adapters count every item removed
// and every prune run.
func TestQueuePrunes(t *testing.T) {
	r := newRig(t)
	vk, client, prefix := r.sharedClient(t)
	src, err := leasequeue.NewValkeySource(vk, "pruned", leasequeue.ValkeyOptions{Prefix: prefix + "q:", DoneRetention: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	q, err := leasequeue.New(client, src, leasequeue.Options{
		Name: "pruned", Policy: policy, PollEvery: 20 * time.Millisecond, PruneEvery: 30 * time.Millisecond,
		Observer: leasequeue.MultiObserver(r.metrics.Queue(), r.tel.Queue()),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := []string{"a", "b", "c", "d", "e"}
	if _, err := src.Enqueue(ctx, ids...); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		errc <- q.Run(runCtx, func(context.Context, *leasequeue.Claim) error { return nil })
	}()
	for r.prom(t, "lease_queue_pruned_items_total") < float64(len(ids)) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the prunes removed %v of %d items in 30s", r.prom(t, "lease_queue_pruned_items_total"), len(ids))
	}
	want(t, "lease_queue_pruned_items_total", r.prom(t, "lease_queue_pruned_items_total"), float64(len(ids)))
	want(t, "lease.queue.pruned_items", r.otel(t, "lease.queue.pruned_items"), float64(len(ids)))
	prunes := r.prom(t, "lease_queue_prunes_total")
	if prunes < 1 {
		t.Errorf("lease_queue_prunes_total = %v, want at least 1", prunes)
	}
	want(t, "lease.queue.prunes", r.otel(t, "lease.queue.prunes"), prunes)
	if n := r.spanCount("lease.queue.prune", false) + r.spanCount("lease.queue.prune", true); float64(n) != prunes {
		t.Errorf("%d lease.queue.prune spans, want %v, one per prune", n, prunes)
	}
}
