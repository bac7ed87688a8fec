package main

import (
	"strings"
	"testing"
)

const input = `goos: linux
rev: head
round: 1
BenchmarkCycle/impl=plain/mode=serial-2     100  1000 ns/op  12 allocs/op
BenchmarkCycle/impl=lease/mode=serial-2     100  1500 ns/op  40 allocs/op
BenchmarkCycle/impl=plain/mode=parallel16-2 100  100 ns/op
BenchmarkCycle/impl=lease/mode=parallel16-2 100  200 ns/op
BenchmarkQueue/workers=8/impl=plain-2       100  1 ns/op  1000 items/s
BenchmarkQueue/workers=8/impl=lease-2       100  1 ns/op  900 items/s
BenchmarkSerialPaired/impl=lease-2          100  5 ns/op  1.20 x-plain
BenchmarkHandOver/mode=notify-2             30   0 ns/op  1.5 median-ms
round: 2
BenchmarkCycle/impl=plain/mode=serial-2     100  2000 ns/op  12 allocs/op
BenchmarkCycle/impl=lease/mode=serial-2     100  2000 ns/op  40 allocs/op
BenchmarkCycle/impl=plain/mode=parallel16-2 100  100 ns/op
BenchmarkCycle/impl=lease/mode=parallel16-2 100  400 ns/op
BenchmarkQueue/workers=8/impl=plain-2       100  1 ns/op  1000 items/s
BenchmarkQueue/workers=8/impl=lease-2       100  1 ns/op  700 items/s
BenchmarkSerialPaired/impl=lease-2          100  5 ns/op  1.40 x-plain
`

// TestReport checks the ratios of a small input: a time ratio in a serial
// group, throughput ratios elsewhere, the per-round ratios and a paired
// benchmark's own ratio.
func TestReport(t *testing.T) {
	samples, err := parse(strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 14 { // HandOver has no impl
		t.Fatalf("parsed %d samples; want 14", len(samples))
	}
	var out strings.Builder
	report(&out, samples, "plain", 2)
	t.Log("\n" + out.String())
	var lines []string // with single spaces between the cells
	for l := range strings.Lines(out.String()) {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	got := strings.Join(lines, "\n")
	for _, want := range []string{
		// serial: medians 1750/1500 ns, time ratio 1.17; per round 1.50 and 1.00; per op 875 ns
		"Cycle/mode=serial lease 1.8µs/op 1.17× time 1.25 (1.00–1.50) 40 0.9µs/op",
		// parallel: medians 300/100 ns, throughput ratio 0.33; per round 0.50 and 0.25
		"Cycle/mode=parallel16 lease 0.3µs/op 0.33× thrpt 0.38 (0.25–0.50)",
		// items/s: 800/1000
		"Queue/workers=8 lease 800 items/s 0.80× thrpt 0.80 (0.70–0.90)",
		"SerialPaired lease x-plain 1.30 (1.20–1.40)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(got, "rev:") {
		t.Errorf("one revision, yet the report names it:\n%s", got)
	}
}

func TestSplitName(t *testing.T) {
	for name, want := range map[string][2]string{
		"BenchmarkCycle/impl=x/mode=serial-2": {"Cycle/mode=serial", "x"},
		"BenchmarkQueue/workers=1/impl=river": {"Queue/workers=1", "river"},
		"BenchmarkHandOver/mode=notify-16":    {"HandOver/mode=notify", ""},
		"BenchmarkCycle/impl=plain-upsert-2":  {"Cycle", "plain-upsert"},
	} {
		if g, i := splitName(name); g != want[0] || i != want[1] {
			t.Errorf("splitName(%q) = %q, %q; want %q, %q", name, g, i, want[0], want[1])
		}
	}
}
