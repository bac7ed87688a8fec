package leaseprom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/golib/lease/cache"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/guard"
	"github.com/golib/lease/internal/testkit/promtest"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leaseprom"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasescheduler"
	"github.com/golib/lease/leasescheduler/jobevent"
)

// gather registers m on a fresh registry and returns its families by name.
func gather(t *testing.T, m *leaseprom.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// value returns the sum of the series of name whose labels include labels.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	return promtest.Sum(fams, name, labels...)
}

func info(key string, token lease.Token, err error) lease.EventInfo {
	return lease.EventInfo{Key: key, Owner: "o", Token: token, Latency: time.Millisecond, Err: err}
}

// permitInfo is info of a permit of the semaphore "jobs": key is a permit
// key, or "jobs" for an AcquireFailed event.
func permitInfo(key string, token lease.Token, err error) lease.EventInfo {
	i := info(key, token, err)
	i.Semaphore = "jobs"
	return i
}

// setInfo is info of the set of keys.
func setInfo(token lease.Token, err error, keys ...string) lease.EventInfo {
	i := info(strings.Join(keys, ","), token, err)
	i.Keys = keys
	return i
}

var (
	errUnknown = lease.Indeterminate(errors.New("i/o timeout"))
	errLost    = &lease.LostError{Key: "k", Reason: lease.Superseded}
)

// TestEveryEventKind sends every event of every package through Metrics
// and checks the series it must move.
func TestEveryEventKind(t *testing.T) {
	type check struct {
		name   string
		labels []string
		want   float64
	}
	notAcquired := &lease.NotAcquiredError{Key: "k", Holder: "other", Remaining: time.Second}
	for _, tc := range []struct {
		name   string
		lease  []lease.Event
		cache  []cache.Event
		queue  []leasequeue.Event
		jobs   []jobevent.Event
		checks []check
		// sums are the sums of histograms' samples.
		sums map[string]float64
	}{
		{name: "acquired", lease: []lease.Event{&lease.Acquired{EventInfo: info("k", 7, nil), Attempts: 3, Waited: 2 * time.Second, Remaining: time.Minute}}, checks: []check{
			{"lease_held", nil, 1},
			{"lease_acquisitions_total", []string{"outcome=ok"}, 1},
			{"lease_acquire_attempts_total", nil, 3},
			{"lease_acquire_wait_seconds", []string{"outcome=ok"}, 1},
			{"lease_backend_request_duration_seconds", []string{"operation=acquire", "outcome=ok"}, 1},
		}},
		{name: "acquire failed: held", lease: []lease.Event{&lease.AcquireFailed{EventInfo: info("k", 0, notAcquired), Attempts: 1}}, checks: []check{
			{"lease_held", nil, 0},
			{"lease_acquisitions_total", []string{"outcome=not_acquired"}, 1},
			{"lease_acquire_attempts_total", nil, 1},
		}},
		{name: "acquire failed: unknown", lease: []lease.Event{&lease.AcquireFailed{EventInfo: info("k", 0, errUnknown), Attempts: 1}}, checks: []check{
			{"lease_acquisitions_total", []string{"outcome=unknown"}, 1},
			{"lease_unknown_outcomes_total", []string{"operation=acquire"}, 1},
		}},
		{name: "renewed and failed", lease: []lease.Event{&lease.Renewed{EventInfo: info("k", 7, nil), Remaining: time.Minute}, &lease.RenewFailed{EventInfo: info("k", 7, errUnknown)}}, checks: []check{
			{"lease_renewals_total", []string{"outcome=ok"}, 1},
			{"lease_renewals_total", []string{"outcome=unknown"}, 1},
			{"lease_unknown_outcomes_total", []string{"operation=renew"}, 1},
			{"lease_backend_request_duration_seconds", []string{"operation=renew"}, 2},
		}},
		{name: "lost then release refused: held counts once", lease: []lease.Event{
			&lease.Acquired{EventInfo: info("k", 7, nil), Attempts: 1, Remaining: time.Minute},
			&lease.Lost{EventInfo: info("k", 7, errLost)},
			&lease.ReleaseFailed{EventInfo: info("k", 7, errLost)},
		}, checks: []check{
			{"lease_held", nil, 0},
			{"lease_losses_total", []string{"reason=superseded"}, 1},
			{"lease_releases_total", []string{"outcome=lost"}, 1},
		}},
		{name: "released, then granted again: hand-over", lease: []lease.Event{
			&lease.Acquired{EventInfo: info("k", 7, nil), Attempts: 1, Remaining: time.Minute},
			&lease.Released{EventInfo: info("k", 7, nil)},
			&lease.Acquired{EventInfo: info("k", 8, nil), Attempts: 4, Remaining: time.Minute},
		}, checks: []check{
			{"lease_held", nil, 1},
			{"lease_releases_total", []string{"outcome=ok"}, 1},
			{"lease_handover_seconds", nil, 1},
		}},
		{name: "release unknown", lease: []lease.Event{
			&lease.Acquired{EventInfo: info("k", 7, nil), Attempts: 1, Remaining: time.Minute},
			&lease.ReleaseFailed{EventInfo: info("k", 7, errUnknown)},
		}, checks: []check{
			{"lease_held", nil, 0},
			{"lease_releases_total", []string{"outcome=unknown"}, 1},
			{"lease_unknown_outcomes_total", []string{"operation=release"}, 1},
			{"lease_handover_seconds", nil, 0},
		}},
		{name: "permit: held, lost", lease: []lease.Event{
			&lease.Acquired{EventInfo: permitInfo("jobs/permit/2", 7, nil), Attempts: 1, Remaining: time.Minute},
			&lease.Acquired{EventInfo: info("k", 8, nil), Attempts: 1, Remaining: time.Minute},
		}, checks: []check{
			{"lease_held", []string{"kind=permit"}, 1},
			{"lease_held", []string{"kind=lease"}, 1},
			{"lease_acquisitions_total", []string{"kind=permit", "outcome=ok"}, 1},
			{"lease_acquire_wait_seconds", []string{"kind=permit", "outcome=ok"}, 1},
		}},
		{name: "permit: lost", lease: []lease.Event{
			&lease.Acquired{EventInfo: permitInfo("jobs/permit/2", 7, nil), Attempts: 1, Remaining: time.Minute},
			&lease.Lost{EventInfo: permitInfo("jobs/permit/2", 7, errLost)},
			&lease.AcquireFailed{EventInfo: permitInfo("jobs", 0, notAcquired), Attempts: 2},
		}, checks: []check{
			{"lease_held", []string{"kind=permit"}, 0},
			{"lease_losses_total", []string{"kind=permit", "reason=superseded"}, 1},
			{"lease_losses_total", []string{"kind=lease", "reason=superseded"}, 0},
			{"lease_acquisitions_total", []string{"kind=permit", "outcome=not_acquired"}, 1},
			{"lease_acquire_attempts_total", []string{"kind=permit"}, 3},
		}},
		{name: "permit: hand-over from one slot to another", lease: []lease.Event{
			&lease.Acquired{EventInfo: permitInfo("jobs/permit/1", 7, nil), Attempts: 1, Remaining: time.Minute},
			&lease.Released{EventInfo: permitInfo("jobs/permit/1", 7, nil)},
			&lease.Acquired{EventInfo: permitInfo("jobs/permit/0", 8, nil), Attempts: 2, Remaining: time.Minute},
		}, checks: []check{
			{"lease_held", []string{"kind=permit"}, 1},
			{"lease_handover_seconds", nil, 1},
		}},
		{name: "set: held, renewed, released", lease: []lease.Event{
			&lease.Acquired{EventInfo: setInfo(7, nil, "a", "b"), Attempts: 1, Remaining: time.Minute},
			&lease.Renewed{EventInfo: setInfo(7, nil, "a", "b"), Remaining: time.Minute},
			&lease.Acquired{EventInfo: setInfo(8, nil, "c", "d"), Attempts: 1, Remaining: time.Minute},
			&lease.Released{EventInfo: setInfo(8, nil, "c", "d")},
		}, checks: []check{
			{"lease_held", []string{"kind=set"}, 1},
			{"lease_renewals_total", []string{"kind=set", "outcome=ok"}, 1},
			{"lease_releases_total", []string{"kind=set", "outcome=ok"}, 1},
			{"lease_acquisitions_total", []string{"kind=set", "outcome=ok"}, 2},
		}},
		{name: "cache", cache: []cache.Event{
			&cache.Served{EventInfo: cache.EventInfo{Key: "c"}, Outcome: cache.Hit},
			&cache.Served{EventInfo: cache.EventInfo{Key: "c"}, Outcome: cache.Stale},
			&cache.Served{EventInfo: cache.EventInfo{Key: "c"}, Outcome: cache.Shared},
			&cache.GetFailed{EventInfo: cache.EventInfo{Key: "c", Err: cache.ErrWaitTimeout}},
			&cache.Refreshed{EventInfo: cache.EventInfo{Key: "c"}},
			&cache.RefreshFailed{EventInfo: cache.EventInfo{Key: "c", Err: errors.New("load failed")}},
			&cache.Published{EventInfo: cache.EventInfo{Key: "c"}, Size: 10},
			&cache.PublishRefused{EventInfo: cache.EventInfo{Key: "c", Err: guard.ErrNotCurrent}},
			&cache.PublishRefused{EventInfo: cache.EventInfo{Key: "c", Err: cache.ErrInvalidated}},
			&cache.Invalidated{EventInfo: cache.EventInfo{Key: "c"}},
		}, checks: []check{
			{"lease_cache_gets_total", []string{"outcome=hit"}, 1},
			{"lease_cache_gets_total", []string{"outcome=stale"}, 1},
			{"lease_cache_gets_total", []string{"outcome=shared"}, 1},
			{"lease_cache_gets_total", []string{"outcome=error"}, 1},
			{"lease_cache_get_duration_seconds", nil, 4},
			{"lease_cache_refreshes_total", []string{"outcome=ok"}, 1},
			{"lease_cache_refreshes_total", []string{"outcome=error"}, 1},
			{"lease_cache_refresh_duration_seconds", nil, 2},
			{"lease_cache_publications_total", []string{"outcome=ok"}, 1},
			{"lease_cache_publications_total", []string{"outcome=not_current"}, 1},
			{"lease_cache_publications_total", []string{"outcome=invalidated"}, 1},
			{"lease_cache_invalidations_total", []string{"outcome=ok"}, 1},
		}},
		{name: "queue", queue: []leasequeue.Event{
			&leasequeue.Claimed{EventInfo: leasequeue.EventInfo{Key: "q"}, Attempt: 2, Age: 3 * time.Second},
			&leasequeue.Claimed{EventInfo: leasequeue.EventInfo{Key: "q", Err: errUnknown}},
			&leasequeue.Completed{EventInfo: leasequeue.EventInfo{Key: "q"}, Attempt: 2},
			&leasequeue.Completed{EventInfo: leasequeue.EventInfo{Key: "q", Err: &fence.StaleError{Resource: "r", Token: 1, Current: 2}}},
			&leasequeue.Failed{EventInfo: leasequeue.EventInfo{Key: "q"}, Attempt: 1},
			&leasequeue.Failed{EventInfo: leasequeue.EventInfo{Key: "q"}, Attempt: 5, Dead: true},
			&leasequeue.Lost{EventInfo: leasequeue.EventInfo{Key: "q", Err: &lease.LostError{Key: "q", Reason: lease.Expired}}},
		}, checks: []check{
			{"lease_queue_claims_total", []string{"outcome=ok"}, 1},
			{"lease_queue_claims_total", []string{"outcome=unknown"}, 1},
			{"lease_queue_claim_attempt", nil, 1},
			{"lease_queue_claim_age_seconds", nil, 1},
			{"lease_queue_completions_total", []string{"outcome=ok"}, 1},
			{"lease_queue_completions_total", []string{"outcome=stale"}, 1},
			{"lease_queue_retries_total", nil, 1},
			{"lease_queue_dead_letters_total", nil, 1},
			{"lease_queue_losses_total", []string{"reason=expired"}, 1},
		}, sums: map[string]float64{"lease_queue_claim_age_seconds": 3, "lease_queue_claim_attempt": 2}},
		{name: "queue prunes", queue: []leasequeue.Event{
			&leasequeue.Pruned{EventInfo: leasequeue.EventInfo{Key: "q/prune/", Token: 3}, Removed: 5},
			&leasequeue.Pruned{EventInfo: leasequeue.EventInfo{Key: "q/prune/", Token: 4}},
			&leasequeue.Pruned{EventInfo: leasequeue.EventInfo{Key: "q/prune/", Token: 5, Err: errUnknown}, Removed: 2},
		}, checks: []check{
			{"lease_queue_prunes_total", []string{"outcome=ok"}, 2},
			{"lease_queue_prunes_total", []string{"outcome=unknown"}, 1},
			{"lease_queue_pruned_items_total", nil, 7},
		}},
		{name: "jobs", jobs: []jobevent.Event{
			&jobevent.Ran{EventInfo: jobevent.EventInfo{Job: "nightly"}, Result: jobevent.OK, End: time.Unix(1_800_000_000, 0)},
			&jobevent.Ran{EventInfo: jobevent.EventInfo{Job: "nightly", Err: errors.New("disk full")}, Result: jobevent.Failed, End: time.Unix(1_800_000_100, 0)},
			&jobevent.Ran{EventInfo: jobevent.EventInfo{Job: "nightly", Err: errLost}, Result: jobevent.Lost},
			&jobevent.Ran{EventInfo: jobevent.EventInfo{Job: "cleanup"}, Result: jobevent.Unchecked},
			&jobevent.NotRun{EventInfo: jobevent.EventInfo{Job: "nightly", Err: &lease.NotAcquiredError{Key: "k"}}, Result: jobevent.Skipped},
			&jobevent.NotRun{EventInfo: jobevent.EventInfo{Job: "nightly", Err: errUnknown}, Result: jobevent.Error},
		}, checks: []check{
			{"lease_job_runs_total", []string{"job_name=nightly", "result=ok"}, 1},
			{"lease_job_runs_total", []string{"job_name=nightly", "result=failed"}, 1},
			{"lease_job_runs_total", []string{"job_name=nightly", "result=lost"}, 1},
			{"lease_job_runs_total", []string{"job_name=nightly", "result=skipped"}, 1},
			{"lease_job_runs_total", []string{"job_name=nightly", "result=error"}, 1},
			{"lease_job_runs_total", []string{"job_name=cleanup", "result=unchecked"}, 1},
			{"lease_job_runs_total", []string{"job_name=cleanup", "result=ok"}, 0},
			{"lease_job_last_success_timestamp_seconds", []string{"job_name=nightly"}, 1_800_000_000},
			{"lease_job_last_success_timestamp_seconds", []string{"job_name=cleanup"}, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := leaseprom.New(leaseprom.Options{})
			for _, e := range tc.lease {
				m.Lease().Observe(e)
			}
			for _, e := range tc.cache {
				m.Cache().Observe(e)
			}
			for _, e := range tc.queue {
				m.Queue().Observe(e)
			}
			for _, e := range tc.jobs {
				m.Jobs().Observe(e)
			}
			fams := gather(t, m)
			for _, c := range tc.checks {
				if got := value(t, fams, c.name, c.labels...); got != c.want {
					t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
				}
			}
			for name, want := range tc.sums {
				var got float64
				for _, m := range fams[name].GetMetric() {
					got += m.GetHistogram().GetSampleSum()
				}
				if got != want {
					t.Errorf("sum of %s = %v, want %v", name, got, want)
				}
			}
		})
	}
}

// TestNoKeyLabelByDefault checks that without KeyLabel no series carries a
// key, however many keys are used.
func TestNoKeyLabelByDefault(t *testing.T) {
	m := leaseprom.New(leaseprom.Options{})
	for i := range 50 {
		m.Lease().Observe(&lease.Acquired{EventInfo: info(fmt.Sprint("job/", i), lease.Token(i+1), nil), Attempts: 1, Remaining: time.Minute})
	}
	fams := gather(t, m)
	for name, f := range fams {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "key" {
					t.Fatalf("%s has a key label without KeyLabel", name)
				}
			}
		}
	}
	if got := value(t, fams, "lease_held"); got != 50 {
		t.Fatalf("lease_held = %v, want 50", got)
	}
	if n := len(fams["lease_held"].GetMetric()); n != 1 {
		t.Fatalf("lease_held has %d series, want 1", n)
	}
}

// TestKeyLabelsBounded checks that KeyLabel's values are capped at
// MaxKeyLabels, the rest counted under "other".
func TestKeyLabelsBounded(t *testing.T) {
	m := leaseprom.New(leaseprom.Options{KeyLabel: func(k string) string { return k }, MaxKeyLabels: 3})
	for i := range 10 {
		m.Lease().Observe(&lease.Acquired{EventInfo: info(fmt.Sprint("job/", i), lease.Token(i+1), nil), Attempts: 1, Remaining: time.Minute})
	}
	fams := gather(t, m)
	if n := len(fams["lease_held"].GetMetric()); n != 4 {
		t.Fatalf("lease_held has %d series, want 3 keys and other", n)
	}
	if got := value(t, fams, "lease_held", "key=other"); got != 7 {
		t.Fatalf(`lease_held{key="other"} = %v, want 7`, got)
	}
	if got := value(t, fams, "lease_held", "key=job/0"); got != 1 {
		t.Fatalf(`lease_held{key="job/0"} = %v, want 1`, got)
	}
}

// TestRealClient runs a client on the memory backend with the observer
// and checks what a scrape shows: two holders, one refused contender, one
// release.
func TestRealClient(t *testing.T) {
	ctx := context.Background()
	m := leaseprom.New(leaseprom.Options{KeyLabel: func(k string) string { return k }})
	store := newMemoryStore()
	a := newClient(t, store, "a", m)
	b := newClient(t, store, "b", m)
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h1, err := a.TryAcquire(ctx, "jobs/1", p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.TryAcquire(ctx, "jobs/2", p); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "jobs/1", p); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("b acquired a held key: %v", err)
	}
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	fams := gather(t, m)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"lease_held", nil, 1},
		{"lease_held", []string{"key=jobs/2"}, 1},
		{"lease_acquisitions_total", []string{"outcome=ok"}, 2},
		{"lease_acquisitions_total", []string{"key=jobs/1", "outcome=not_acquired"}, 1},
		{"lease_releases_total", []string{"outcome=ok"}, 1},
		{"lease_backend_request_duration_seconds", []string{"operation=acquire"}, 3},
	} {
		if got := value(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// TestHeldEndsByExpiry: a lease that is neither released nor reported
// lost (its handle dropped) leaves lease_held once its local deadline has
// passed, as the backend's record expires.
func TestHeldEndsByExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := leaseprom.New(leaseprom.Options{KeyLabel: func(k string) string { return k }})
	c := newClient(t, newMemoryStore(), "a", m)
	short, err := lease.NewPolicy(lease.PolicyOptions{TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	long, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "dropped", short); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "kept", long); err != nil {
		t.Fatal(err)
	}
	if got := value(t, gather(t, m), "lease_held"); got != 2 {
		t.Fatalf("lease_held = %v after two acquisitions, want 2", got)
	}
	time.Sleep(150 * time.Millisecond) // past the dropped lease's TTL
	fams := gather(t, m)
	if got := value(t, fams, "lease_held", "key=dropped"); got != 0 {
		t.Errorf(`lease_held{key="dropped"} = %v after its TTL, want 0`, got)
	}
	if got := value(t, fams, "lease_held", "key=kept"); got != 1 {
		t.Errorf(`lease_held{key="kept"} = %v, want 1`, got)
	}
}

// TestSlotLeasesLeaveHeld runs a job once per 50 ms slot for half a
// second on a lone replica: every slot's lease, never released, leaves
// lease_held when it expires, so the gauge ends at 0, not at one per slot.
func TestSlotLeasesLeaveHeld(t *testing.T) {
	t.Parallel()
	m := leaseprom.New(leaseprom.Options{KeyLabel: func(k string) string { return k }})
	c := newClient(t, newMemoryStore(), "a", m)
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := leasescheduler.NewLocker(c, leasescheduler.Options{Policy: p, Slots: leasescheduler.Every(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	job := l.CronJob("tick", func(context.Context, leasescheduler.Run) error { return nil }, nil)
	runs := 0
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		job.Run()
		runs++
	}
	// A slot's lease lasts until half an interval after the slot.
	deadline := time.Now().Add(2 * time.Second)
	for value(t, gather(t, m), "lease_held") != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	fams := gather(t, m)
	if got := value(t, fams, "lease_held"); got != 0 {
		for _, s := range fams["lease_held"].GetMetric() {
			if s.GetGauge().GetValue() != 0 {
				t.Logf("%v %v", s.GetLabel(), s.GetGauge().GetValue())
			}
		}
		t.Fatalf("lease_held = %v two seconds after %d runs, want 0", got, runs)
	}
	if got := value(t, fams, "lease_acquisitions_total", "outcome=ok"); got < float64(runs) {
		t.Fatalf("%v acquisitions for %d runs", got, runs)
	}
}

// TestCountersStartAtZero: the counters (and histograms) whose label
// values are known in advance exist at 0 before their first event, so that
// rate() and increase() see that event; the keyed ones once their key
// label is seen.
func TestCountersStartAtZero(t *testing.T) {
	fams := gather(t, leaseprom.New(leaseprom.Options{}))
	for _, s := range []struct {
		name   string
		labels []string
	}{
		{"lease_held", []string{"kind=lease"}},
		{"lease_losses_total", []string{"kind=lease", "reason=expired"}},
		{"lease_losses_total", []string{"reason=force_released"}},
		{"lease_losses_total", []string{"reason=record_lost"}},
		{"lease_unknown_outcomes_total", []string{"operation=renew"}},
		{"lease_renewals_total", []string{"outcome=lost"}},
		{"lease_releases_total", []string{"outcome=unknown"}},
		{"lease_queue_dead_letters_total", nil},
		{"lease_queue_retries_total", nil},
		{"lease_queue_losses_total", []string{"reason=expired"}},
		{"lease_queue_prunes_total", []string{"outcome=error"}},
		// Histograms too, where a rate() of their buckets is alerted on.
		{"lease_backend_request_duration_seconds", []string{"operation=renew", "outcome=ok"}},
		{"lease_queue_claim_age_seconds", nil},
	} {
		if !present(fams, s.name, s.labels...) {
			t.Errorf("%s%v: no series before any event", s.name, s.labels)
		}
	}
	// Keyed: a replica that only ever failed to acquire shows the key's
	// lease_held at 0 and its losses at 0.
	m := leaseprom.New(leaseprom.Options{KeyLabel: func(k string) string { return k }})
	if present(gather(t, m), "lease_held") {
		t.Error("lease_held has a series before any key was seen")
	}
	m.Lease().Observe(&lease.AcquireFailed{EventInfo: info("singleton", 0, &lease.NotAcquiredError{Key: "singleton"}), Attempts: 1})
	fams = gather(t, m)
	for _, s := range [][]string{
		{"lease_held", "key=singleton"},
		{"lease_losses_total", "key=singleton", "reason=deadline_passed"},
		{"lease_renewals_total", "key=singleton", "outcome=error"},
	} {
		if !present(fams, s[0], s[1:]...) {
			t.Errorf("%s%v: no series after the key was seen", s[0], s[1:])
		}
	}
	// Kinds: the permit series of a key label start when its first permit
	// event is seen.
	if present(fams, "lease_losses_total", "kind=permit") {
		t.Error("lease_losses_total has a permit series before any permit was seen")
	}
	m.Lease().Observe(&lease.AcquireFailed{EventInfo: permitInfo("jobs", 0, &lease.NotAcquiredError{Key: "jobs"}), Attempts: 1})
	fams = gather(t, m)
	for _, s := range [][]string{
		{"lease_held", "key=jobs", "kind=permit"},
		{"lease_losses_total", "key=jobs", "kind=permit", "reason=expired"},
		{"lease_releases_total", "key=jobs", "kind=permit", "outcome=unknown"},
	} {
		if !present(fams, s[0], s[1:]...) {
			t.Errorf("%s%v: no series after the semaphore was seen", s[0], s[1:])
		}
	}
	if present(fams, "lease_held", "key=jobs", "kind=lease") {
		t.Error(`lease_held{key="jobs",kind="lease"}: a series, though no lease of that label was seen`)
	}
	// Jobs: a job's runs by result, once it is added.
	m.Jobs().Observe(&jobevent.Added{EventInfo: jobevent.EventInfo{Job: "nightly"}})
	fams = gather(t, m)
	for _, r := range jobevent.Results {
		if !present(fams, "lease_job_runs_total", "job_name=nightly", "result="+r.String()) {
			t.Errorf("lease_job_runs_total{result=%q}: no series after the job was seen", r)
		}
	}
	if present(fams, "lease_job_last_success_timestamp_seconds") {
		t.Error("lease_job_last_success_timestamp_seconds has a series before any success")
	}
}

// present reports whether family name has a series whose labels include
// labels.
func present(fams map[string]*dto.MetricFamily, name string, labels ...string) bool {
	for _, m := range fams[name].GetMetric() {
		if promtest.Has(m, labels...) {
			return true
		}
	}
	return false
}

// TestPermitsAndSetsBounded runs a real client's permits and sets through
// Metrics with the identity as KeyLabel: the slots of a semaphore share
// its label, every set is labelled by its first key, so 45 distinct sets
// of 10 keys and 40 slots make 10 key labels, not one per slot and per
// set; lease_held counts the permits of the semaphore, each set once, and
// follows their releases and their expiry.
func TestPermitsAndSetsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := leaseprom.New(leaseprom.Options{KeyLabel: func(k string) string { return k }})
	c := newClient(t, newMemoryStore(), "a", m)
	long, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	short, err := lease.NewPolicy(lease.PolicyOptions{TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const slots = 40
	var permits []*lease.Handle
	for range slots {
		h, err := c.TryAcquirePermit(ctx, "exports", slots, long)
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, h)
	}
	if _, err := c.TryAcquirePermit(ctx, "exports", slots, long); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("permit %d of %d: %v, want ErrNotAcquired", slots+1, slots, err)
	}
	for _, h := range permits[:10] {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Every pair of 10 accounts, each taken and released; then one set
	// kept and one left to expire.
	for i := range 10 {
		for j := i + 1; j < 10; j++ {
			h, err := c.TryAcquireSet(ctx, []string{fmt.Sprint("acct/", j), fmt.Sprint("acct/", i)}, long)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := c.TryAcquireSet(ctx, []string{"acct/1", "acct/0"}, long); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquireSet(ctx, []string{"acct/3", "acct/2"}, short); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquirePermit(ctx, "exports", slots, short); err != nil {
		t.Fatal(err)
	}
	fams := gather(t, m)
	labels := map[string]bool{}
	for _, name := range []string{"lease_held", "lease_acquisitions_total", "lease_acquire_attempts_total", "lease_releases_total", "lease_renewals_total", "lease_losses_total"} {
		for _, s := range fams[name].GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "key" {
					labels[l.GetValue()] = true
				}
			}
		}
	}
	if len(labels) != 10 || !labels["exports"] || labels["other"] {
		t.Fatalf("key labels %v: want exports and acct/0 to acct/8, one per semaphore and per set's first key", labels)
	}
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"key=exports", "kind=permit"}, slots - 10 + 1},
		{[]string{"kind=set"}, 2},
		{[]string{"key=acct/0", "kind=set"}, 1},
		{[]string{"key=acct/2", "kind=set"}, 1},
		{[]string{"kind=lease"}, 0},
	} {
		if got := value(t, fams, "lease_held", c.labels...); got != c.want {
			t.Errorf("lease_held%v = %v, want %v", c.labels, got, c.want)
		}
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"lease_acquisitions_total", []string{"key=exports", "kind=permit", "outcome=ok"}, slots + 1},
		{"lease_acquisitions_total", []string{"key=exports", "kind=permit", "outcome=not_acquired"}, 1},
		{"lease_acquisitions_total", []string{"kind=set", "outcome=ok"}, 45 + 2},
		{"lease_acquisitions_total", []string{"key=acct/0", "kind=set", "outcome=ok"}, 9 + 1},
		{"lease_releases_total", []string{"key=exports", "kind=permit", "outcome=ok"}, 10},
		{"lease_releases_total", []string{"kind=set", "outcome=ok"}, 45},
		{"lease_acquire_wait_seconds", []string{"kind=permit"}, slots + 2},
	} {
		if got := value(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	time.Sleep(150 * time.Millisecond) // past the short permit's and set's TTL
	fams = gather(t, m)
	if got := value(t, fams, "lease_held", "key=exports", "kind=permit"); got != slots-10 {
		t.Errorf(`lease_held{key="exports",kind="permit"} = %v after one permit expired, want %d`, got, slots-10)
	}
	if got := value(t, fams, "lease_held", "key=acct/2", "kind=set"); got != 0 {
		t.Errorf(`lease_held{key="acct/2",kind="set"} = %v after the set expired, want 0`, got)
	}
	if got := value(t, fams, "lease_held", "kind=set"); got != 1 {
		t.Errorf(`lease_held{kind="set"} = %v, want 1`, got)
	}
}
