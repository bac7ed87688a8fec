// Package promtest reads values out of gathered or scraped Prometheus
// metric families, for the tests of the observability adapters.
package promtest

import (
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// Sum returns the sum over the series of family name whose labels include
// every one of labels ("name=value"): a counter's or gauge's value, a
// histogram's sample count. A missing family sums to 0.
func Sum(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	var sum float64
	for _, m := range fams[name].GetMetric() {
		if !Has(m, labels...) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// Has reports whether m carries every one of labels ("name=value").
func Has(m *dto.Metric, labels ...string) bool {
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		found := false
		for _, p := range m.GetLabel() {
			found = found || (p.GetName() == k && p.GetValue() == v)
		}
		if !found {
			return false
		}
	}
	return true
}
