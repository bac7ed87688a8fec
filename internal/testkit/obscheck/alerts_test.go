package obscheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/attribute"

	leasememory "github.com/golib/lease/backends/memory"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/testkit/valkeyacl"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasescheduler"
	"github.com/golib/lease/leasescheduler/jobevent"
	"github.com/golib/lease/leasetest"
)

// The tests in this file make every alert of docs/lease.rules.yml fire and
// clear: real lease clients on a real Valkey server (or on the memory
// backend where the alert does not depend on the backend), each "process"
// with its own leaseprom registry served over HTTP, scraped and evaluated
// by the Prometheus of promql_test.go. Each test names the alerts it
// exercises; TestMain checks that together they cover the rules file.

// exercised collects the alerts that fired and cleared in this run.
var exercised sync.Map

// firstSegment is the KeyLabel of examples/metrics: the part of a key
// before its first '/', so the singleton "reports/nightly" reads
// key="reports", as the rules file expects.
func firstSegment(key string) string { job, _, _ := strings.Cut(key, "/"); return job }

// process is one replica: a lease client on backend, with its own rig
// (leaseprom registry served over HTTP, and leaseotel).
type process struct {
	*rig
	client *lease.Client
}

func newProcess(t *testing.T, owner string, backend lease.Backend) *process {
	t.Helper()
	r := newLabelledRig(t, firstSegment)
	c, err := lease.NewClient(backend, lease.ClientOptions{Owner: owner, Observer: r.leaseObserver()})
	if err != nil {
		t.Fatal(err)
	}
	return &process{rig: r, client: c}
}

func policy(t *testing.T, o lease.PolicyOptions) lease.Policy {
	t.Helper()
	p, err := lease.NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// done records that alerts fired and cleared, after checking it.
func (p *prom) done(alerts []string, never ...string) {
	p.t.Helper()
	p.firedAndCleared(alerts, never...)
	if !p.t.Failed() {
		for _, a := range alerts {
			exercised.Store(a, p.t.Name())
		}
	}
}

// TestAlertsSingletonAndTwoHolders: a singleton that no replica has held
// yet (none exports its series), held, then released by force while its
// holder keeps renewing, and taken by the other replica: two holders until
// the first one's next renewal says the lease is lost; then released and
// held nowhere, and taken again.
func TestAlertsSingletonAndTwoHolders(t *testing.T) {
	t.Parallel()
	vk := dial(t, testserver.Valkey(t).Addr())
	store, err := leasevalkey.New(vk, leasevalkey.Options{Prefix: fmt.Sprintf("obs%d:lease:", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newProcess(t, "a", store), newProcess(t, "b", store)
	p := newProm(t, time.Now())
	p.target("a", a.scrape.URL)
	p.target("b", b.scrape.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "reports/nightly"
	pol := policy(t, lease.PolicyOptions{TTL: 4 * time.Second, RenewEvery: 2 * time.Second})

	p.steps(75*time.Second, 15*time.Second)
	p.wantFiring("LeaseSingletonHeldNowhere", true, "no replica has seen the singleton yet")

	ha, err := a.client.TryAcquire(ctx, key, pol)
	if err != nil {
		t.Fatal(err)
	}
	ma, err := ha.StartManaged(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.TryAcquire(ctx, key, pol); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("b acquired a held key: %v", err)
	}
	p.step(15 * time.Second)
	p.wantFiring("LeaseSingletonHeldNowhere", false, "a holds the singleton")

	// An operator releases a's lease by force (leasectl release --force),
	// and b takes the key before a's next renewal.
	if _, err := store.ForceRelease(ctx, key, ha.Token()); err != nil {
		t.Fatal(err)
	}
	hb, err := b.client.TryAcquire(ctx, key, pol)
	if err != nil {
		t.Fatal(err)
	}
	p.steps(75*time.Second, 15*time.Second)
	select {
	case <-ma.Lost():
		t.Fatal("a noticed the loss before the scrapes ran; the run shows nothing")
	default:
	}
	p.wantFiring("LeaseHeldByTwo", true, "a and b both count the key as held")

	select {
	case <-ma.Lost():
	case <-ctx.Done():
		t.Fatal("a never noticed that it lost the lease")
	}
	if err := ha.Release(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("a's release after the loss = %v, want ErrLost", err)
	}
	p.step(15 * time.Second)
	p.wantFiring("LeaseHeldByTwo", false, "a's renewal found the lease lost")
	p.wantFiring("LeaseLost", true, "a lost its lease")
	p.wantFiring("LeaseRenewalsFailing", true, "a's renewal failed")
	want(t, `lease_losses_total{reason="superseded"}`, a.prom(t, "lease_losses_total", "key=reports", "reason=superseded"), 1)

	if err := hb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.steps(75*time.Second, 15*time.Second)
	p.wantFiring("LeaseSingletonHeldNowhere", true, "b released the singleton and nobody took it")
	p.steps(6*time.Minute, 30*time.Second)
	p.wantFiring("LeaseLost", false, "no loss for six minutes")
	p.wantFiring("LeaseRenewalsFailing", false, "no failed renewal for six minutes")

	hb, err = b.client.TryAcquire(ctx, key, pol)
	if err != nil {
		t.Fatal(err)
	}
	p.step(15 * time.Second)
	if err := hb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.done([]string{"LeaseSingletonHeldNowhere", "LeaseHeldByTwo", "LeaseLost", "LeaseRenewalsFailing"},
		"LeaseReleasesFailing", "LeaseUnknownOutcomes", "LeaseRenewalsSlow")
}

// TestAlertsOnPausedServer pauses a dedicated Valkey server during a
// renewal, which comes back slow, and during a release, which times out
// with its outcome unknown.
func TestAlertsOnPausedServer(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	store, err := leasevalkey.New(dial(t, srv.Addr()), leasevalkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := newProcess(t, "a", store)
	p := newProm(t, time.Now())
	p.target("a", a.scrape.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pol := policy(t, lease.PolicyOptions{TTL: 12 * time.Second, OperationTimeout: 2500 * time.Millisecond})
	h, err := a.client.TryAcquire(ctx, "reports/nightly", pol)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	p.step(15 * time.Second)

	// A renewal that waits 1.2 s for the server, inside its timeout.
	srv.Pause()
	resumed := make(chan struct{})
	go func() { time.Sleep(1200 * time.Millisecond); srv.Resume(); close(resumed) }()
	if err := h.Renew(ctx); err != nil {
		t.Fatalf("renewal across a 1.2 s pause: %v", err)
	}
	<-resumed
	p.step(15 * time.Second)
	p.wantFiring("LeaseRenewalsSlow", true, "a renewal took 1.2 s")

	// A release that times out: its outcome is unknown. (Another lease,
	// whose requests time out sooner.)
	quick, err := a.client.TryAcquire(ctx, "reports/quick", policy(t, lease.PolicyOptions{TTL: 10 * time.Second, OperationTimeout: 200 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	err = quick.Release(ctx)
	srv.Resume()
	if !errors.Is(err, lease.ErrIndeterminate) {
		t.Fatalf("release on a paused server = %v, want ErrIndeterminate", err)
	}
	p.step(15 * time.Second)
	p.wantFiring("LeaseUnknownOutcomes", true, "a release's outcome is unknown")
	p.wantFiring("LeaseReleasesFailing", true, "a release failed")

	p.steps(6*time.Minute, 30*time.Second)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.done([]string{"LeaseRenewalsSlow", "LeaseUnknownOutcomes", "LeaseReleasesFailing"}, "LeaseLost", "LeaseHeldByTwo")
}

// TestAlertQueueFallingBehind: items wait 20 s (on the source's clock)
// before a worker claims them.
func TestAlertQueueFallingBehind(t *testing.T) {
	t.Parallel()
	a := newProcess(t, "a", leasememory.New(leasememory.Options{}))
	clock := leasetest.NewFakeClock(time.Now())
	src := leasequeue.NewMemorySource(leasequeue.MemoryOptions{Clock: clock})
	q, err := leasequeue.New(a.client, src, leasequeue.Options{
		Name: "jobs", Policy: policy(t, lease.PolicyOptions{TTL: 5 * time.Second}), PollEvery: 10 * time.Millisecond,
		Observer: leasequeue.MultiObserver(a.metrics.Queue(), a.tel.Queue()),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := newProm(t, time.Now())
	p.target("a", a.scrape.URL)
	p.step(15 * time.Second)

	ids := []string{"a", "b", "c", "d", "e"}
	src.Enqueue(ids...)
	clock.Advance(20 * time.Second) // nobody works for 20 s
	runQueue(t, q, func() bool { return a.prom(t, "lease_queue_completions_total", "outcome=ok") == float64(len(ids)) })
	p.step(15 * time.Second)
	p.wantFiring("LeaseQueueFallingBehind", true, "items waited 20 s")
	p.steps(6*time.Minute, 30*time.Second)
	p.done([]string{"LeaseQueueFallingBehind"})
}

// TestAlertQueuePrunesFailing: the workers' Valkey user lacks +del, which
// the prune of finished items needs.
func TestAlertQueuePrunesFailing(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	rule := strings.Replace(valkeyacl.Queue, " +del ", " ", 1)
	if rule == valkeyacl.Queue {
		t.Fatal("valkeyacl.Queue has no +del to leave out")
	}
	user := valkeyacl.Login(t, dial(t, srv.Addr()), srv.Addr(), "workers", rule)
	store, err := leasevalkey.New(user, leasevalkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := newProcess(t, "a", store)
	src, err := leasequeue.NewValkeySource(user, "jobs", leasequeue.ValkeyOptions{DoneRetention: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	q, err := leasequeue.New(a.client, src, leasequeue.Options{
		Name: "jobs", Policy: policy(t, lease.PolicyOptions{TTL: 5 * time.Second}), PollEvery: 10 * time.Millisecond, PruneEvery: 30 * time.Millisecond,
		Observer: leasequeue.MultiObserver(a.metrics.Queue(), a.tel.Queue()),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := newProm(t, time.Now())
	p.target("a", a.scrape.URL)
	p.step(15 * time.Second)
	if _, err := src.Enqueue(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	runQueue(t, q, func() bool { return a.prom(t, "lease_queue_prunes_total", "outcome=error") > 0 })
	p.step(15 * time.Second)
	p.wantFiring("LeaseQueuePrunesFailing", true, "a prune failed")
	p.steps(61*time.Minute, 5*time.Minute)
	p.done([]string{"LeaseQueuePrunesFailing"})
}

// runQueue runs q until until holds, for at most 20 s.
func runQueue(t *testing.T, q *leasequeue.Queue, until func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		errc <- q.Run(runCtx, func(context.Context, *leasequeue.Claim) error { return nil })
	}()
	for !until() && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the queue did not get there in 20 s")
	}
}

// TestAlertsJobs runs a nightly job on two replicas, on a scheduler clock
// that follows the scrapes' virtual time: no success yet, a success, a
// failed run a day later and no success for 25 hours, then a success.
func TestAlertsJobs(t *testing.T) {
	t.Parallel()
	start := time.Now()
	clock := leasetest.NewFakeClock(start)
	backend := leasememory.New(leasememory.Options{})
	a, b := newProcess(t, "a", backend), newProcess(t, "b", backend)
	locker := func(pr *process) *leasescheduler.Locker {
		l, err := leasescheduler.NewLocker(pr.client, leasescheduler.Options{
			Policy:   policy(t, lease.PolicyOptions{TTL: 10 * time.Second}),
			Clock:    clock, // the runs' times; the leases run on real time
			Observer: jobevent.MultiObserver(pr.metrics.Jobs(), pr.tel.Jobs()),
		})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// The jobs are built at start, as a program does: their series exist
	// at 0 before the first run.
	var errA, errB error
	job := func(l *leasescheduler.Locker, err *error) cron.Job {
		return l.CronJob("nightly", func(context.Context, leasescheduler.Run) error { return *err }, nil)
	}
	ja, jb := job(locker(a), &errA), job(locker(b), &errB)
	p := newProm(t, start)
	p.target("a", a.scrape.URL)
	p.target("b", b.scrape.URL)
	advance := func(total time.Duration) { // scrapes every half hour
		for end := p.now.Add(total); p.now.Before(end); {
			clock.Advance(30 * time.Minute)
			p.step(30 * time.Minute)
		}
	}

	p.step(0)
	p.wantFiring("LeaseJobNoRecentSuccess", true, "no replica has run the job yet")
	ja.Run()
	advance(30 * time.Minute)
	p.wantFiring("LeaseJobNoRecentSuccess", false, "a ran the job")

	advance(24 * time.Hour)
	errB = errors.New("disk full")
	jb.Run()
	advance(30 * time.Minute)
	p.wantFiring("LeaseJobRunsFailing", true, "b's run failed")
	p.wantFiring("LeaseJobNoRecentSuccess", false, "25 hours since the success, not more")
	advance(time.Hour)
	p.wantFiring("LeaseJobNoRecentSuccess", true, "26 hours without a success")

	ja.Run()
	advance(30 * time.Minute)
	p.wantFiring("LeaseJobNoRecentSuccess", false, "a ran the job again")
	advance(2 * time.Hour)
	p.done([]string{"LeaseJobNoRecentSuccess", "LeaseJobRunsFailing"})

	// Both adapters counted the same.
	want(t, `lease_job_runs_total{result="failed"} on b`, b.prom(t, "lease_job_runs_total", "job_name=nightly", "result=failed"), 1)
	want(t, `lease.job.runs{failed} on b`, b.otel(t, "lease.job.runs", "lease.job.name=nightly", "lease.job.result=failed"), 1)
	want(t, `lease_job_runs_total{result="ok"} on a`, a.prom(t, "lease_job_runs_total", "job_name=nightly", "result=ok"), 2)
	want(t, `lease.job.runs{ok} on a`, a.otel(t, "lease.job.runs", "lease.job.name=nightly", "lease.job.result=ok"), 2)
	last := a.prom(t, "lease_job_last_success_timestamp_seconds", "job_name=nightly")
	want(t, "lease.job.last_success on a", a.otel(t, "lease.job.last_success", "lease.job.name=nightly"), last)
	if n := a.spanCount("lease.job.run", false); n != 2 {
		t.Errorf("%d lease.job.run spans on a, want 2", n)
	}
}

// TestAlertHeldByTwoQuietOnSlots: a lone replica runs a job once per
// 100 ms slot; each slot's lease is never released and expires. With one
// key label per key, LeaseHeldByTwo must not fire (it did while expired
// slot leases stayed counted), and lease_held (and OpenTelemetry's
// lease.held) ends at 0.
func TestAlertHeldByTwoQuietOnSlots(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	client, err := lease.NewClient(leasememory.New(leasememory.Options{}), lease.ClientOptions{Owner: "a", Observer: r.leaseObserver()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := leasescheduler.NewLocker(client, leasescheduler.Options{
		Policy: policy(t, lease.PolicyOptions{TTL: time.Second}),
		Slots:  leasescheduler.Every(100 * time.Millisecond),
	})
	if err != nil {
		t.Fatal(err)
	}
	job := l.CronJob("tick", func(context.Context, leasescheduler.Run) error { return nil }, nil)
	p := newProm(t, time.Now())
	p.target("a", r.scrape.URL)
	for range 12 {
		job.Run()
		p.step(15 * time.Second)
		time.Sleep(100 * time.Millisecond) // the next slot
	}
	for deadline := time.Now().Add(2 * time.Second); r.prom(t, "lease_held") > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	p.steps(2*time.Minute, 15*time.Second)
	p.firedAndCleared(nil, "LeaseHeldByTwo")
	if v := p.query("sum(lease_held)"); len(v) != 1 || v[0].F != 0 {
		t.Errorf("sum(lease_held) = %v after the slots expired, want 0", v)
	}
	want(t, "lease.held after the slots expired", r.otel(t, "lease.held"), 0)
	if got := r.otel(t, "lease.acquisitions", "lease.outcome=ok"); got < 24 {
		t.Errorf("lease.acquisitions{ok} = %v, want a run and a slot lease for each of 12 runs", got)
	}
}

// TestAlertHeldByTwoQuietOnPermits: two replicas on a real Valkey server
// hold two permits each of one semaphore, whose key label ("exports") stands for the semaphore, and
// one of them a set of two keys. Four permits under one key label are not
// two holders of a lease: LeaseHeldByTwo must not fire. lease_held counts
// them under kind="permit" (and the set once, under kind="set" and the
// label of its first key), in Prometheus and OpenTelemetry, and follows a
// release and an expiry.
func TestAlertHeldByTwoQuietOnPermits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	vk := dial(t, testserver.Valkey(t).Addr())
	store, err := leasevalkey.New(vk, leasevalkey.Options{Prefix: fmt.Sprintf("obs%d:lease:", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newProcess(t, "a", store), newProcess(t, "b", store)
	p := newProm(t, time.Now())
	p.target("a", a.scrape.URL)
	p.target("b", b.scrape.URL)
	long := policy(t, lease.PolicyOptions{TTL: time.Hour})
	var mine []*lease.Handle
	for _, proc := range []*process{a, b, a, b} {
		h, err := proc.client.TryAcquirePermit(ctx, "exports/tenant-1", 8, long)
		if err != nil {
			t.Fatal(err)
		}
		if proc == a {
			mine = append(mine, h)
		}
	}
	// One hash tag, as a set needs on a cluster.
	set, err := a.client.TryAcquireSet(ctx, []string{"accounts/{17-42}/42", "accounts/{17-42}/17"}, long)
	if err != nil {
		t.Fatal(err)
	}
	p.steps(2*time.Minute, 15*time.Second)
	p.firedAndCleared(nil, "LeaseHeldByTwo")
	if v := p.query(`sum by (key, kind) (lease_held{kind="permit"})`); len(v) != 1 || v[0].F != 4 || v[0].Metric.Get("key") != "exports" {
		t.Errorf(`sum by (key, kind) (lease_held{kind="permit"}) = %v, want exports 4`, v)
	}
	want(t, `lease_held{kind="set"} on a`, a.prom(t, "lease_held", "key=accounts", "kind=set"), 1)
	want(t, `lease.held{permit} on a`, a.otel(t, "lease.held", "lease.key=exports", "lease.kind=permit"), 2)
	want(t, `lease.held{set} on a`, a.otel(t, "lease.held", "lease.key=accounts", "lease.kind=set"), 1)
	want(t, `lease.acquisitions{permit} on b`, b.otel(t, "lease.acquisitions", "lease.key=exports", "lease.kind=permit", "lease.outcome=ok"), 2)

	// a releases a permit and its set, and takes a permit that it leaves
	// to expire.
	if err := mine[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.client.TryAcquirePermit(ctx, "exports/tenant-1", 8, policy(t, lease.PolicyOptions{TTL: 100 * time.Millisecond})); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // past its TTL
	p.step(15 * time.Second)
	if v := p.query(`sum(lease_held)`); len(v) != 1 || v[0].F != 3 {
		t.Errorf("sum(lease_held) = %v after a release and an expiry, want 3 permits", v)
	}
	want(t, "lease.held on a after its release and expiry", a.otel(t, "lease.held"), 1)
	want(t, `lease_releases_total{permit} on a`, a.prom(t, "lease_releases_total", "key=exports", "kind=permit", "outcome=ok"), 1)
	// Spans name the set by its keys, and say what it is.
	sets := 0
	for _, s := range a.spans.GetSpans() {
		for _, kv := range s.Attributes {
			if kv.Key == "lease.kind" && kv.Value.AsString() == "set" {
				sets++
				if key := attrString(s.Attributes, "lease.key"); key != "accounts/{17-42}/17,accounts/{17-42}/42" {
					t.Errorf("%s span of the set has lease.key %q", s.Name, key)
				}
			}
		}
	}
	if sets != 2 {
		t.Errorf("%d spans with lease.kind=set on a, want 2 (acquire, release)", sets)
	}
}

// attrString returns the value of the attribute key in attrs, or "".
func attrString(attrs []attribute.KeyValue, key attribute.Key) string {
	for _, kv := range attrs {
		if kv.Key == key {
			return kv.Value.AsString()
		}
	}
	return ""
}
