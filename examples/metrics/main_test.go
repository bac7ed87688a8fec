package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads the example's /metrics as a Prometheus server would and
// returns each series' value by its name and labels, e.g.
// `lease_queue_completions_total{outcome="ok"}`; histograms by their count.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, body)
	}
	out := make(map[string]float64)
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			id := name
			if len(labels) > 0 {
				id += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[id] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[id] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[id] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func TestServesMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, ln, 20) }()
	url := "http://" + ln.Addr().String() + "/metrics"

	deadline := time.Now().Add(30 * time.Second)
	var got map[string]float64
	for {
		got = scrape(t, url)
		if got[`lease_queue_completions_total{outcome="ok"}`] == 20 && got[`lease_acquisitions_total{key="reports",kind="lease",outcome="ok"}`] >= 2 &&
			got[`lease_queue_pruned_items_total`] == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet did not finish its work in 30s; last scrape: %v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	t.Logf("last scrape: %v", got)
	for series, want := range map[string]float64{
		`lease_queue_claims_total{outcome="ok"}`:      22, // 20 items, 2 of them (item-5, item-15) twice
		`lease_queue_completions_total{outcome="ok"}`: 20,
		`lease_queue_retries_total`:                   2,
		`lease_queue_dead_letters_total`:              0,
		`lease_queue_pruned_items_total`:              20, // every done item, once
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
	// The singleton is held by one worker at a time; the items' leases come
	// and go. Every lease held was acquired, and none was lost. Its key
	// label is "reports", which the singleton alert of docs/lease.rules.yml
	// names.
	held, ok := got[`lease_held{key="reports",kind="lease"}`]
	if !ok {
		t.Errorf(`no series lease_held{key="reports",kind="lease"}, which docs/lease.rules.yml alerts on`)
	}
	if held > 1 {
		t.Errorf(`lease_held{key="reports",kind="lease"} = %v: more than one holder of the singleton`, held)
	}
	if n := got[`lease_renewals_total{key="reports",kind="lease",outcome="ok"}`]; n < 1 {
		t.Errorf("the singleton was never renewed: %v", n)
	}
	for series, v := range got {
		if strings.HasPrefix(series, "lease_losses_total") && v != 0 {
			t.Errorf("%s = %v: a lease was lost in a quiet run", series, v)
		}
	}
}
