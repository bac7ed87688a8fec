// Package paired runs two implementations of one operation alternately in
// one benchmark, so that a change in the load of a shared machine hits
// both alike, and reports the ratio of their costs: steadier than the
// ratio of two benchmarks run one after the other.
package paired

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// An Op is one operation of an implementation (an acquire→release cycle)
// on key. Each goroutine of a run has a key of its own, and each
// implementation its own keys.
type Op func(ctx context.Context, key string) error

// Serial runs base and impl alternately on one goroutine, b.N times each,
// alternating which goes first so that neither always follows the other.
// It reports base-ns/cycle, impl-ns/cycle and "x-"+name, impl's time over
// base's (lower is better). ns/op is the time of one pair. Each Op runs
// once before the clock starts, to connect and prepare statements.
func Serial(b *testing.B, name string, base, impl Op) {
	ctx := context.Background()
	baseKey, implKey := b.Name()+"/base", b.Name()+"/impl"
	warmUp(b, ctx, base, baseKey, impl, implKey)
	var baseTime, implTime time.Duration
	b.ResetTimer()
	for i := range b.N {
		first, second := base, impl
		firstKey, secondKey := baseKey, implKey
		if i%2 == 1 {
			first, second, firstKey, secondKey = impl, base, implKey, baseKey
		}
		t0 := time.Now()
		if err := first(ctx, firstKey); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := second(ctx, secondKey); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if i%2 == 0 {
			baseTime, implTime = baseTime+t1.Sub(t0), implTime+t2.Sub(t1)
		} else {
			implTime, baseTime = implTime+t1.Sub(t0), baseTime+t2.Sub(t1)
		}
	}
	b.ReportMetric(float64(baseTime.Nanoseconds())/float64(b.N), "base-ns/cycle")
	b.ReportMetric(float64(implTime.Nanoseconds())/float64(b.N), "impl-ns/cycle")
	b.ReportMetric(float64(implTime)/float64(baseTime), "x-"+name)
}

// Parallel runs base and impl in alternating batches of batch operations,
// each batch on len(base) goroutines for base and len(impl) for impl
// (goroutine g calls base[g] or impl[g], so an Op that must not be shared,
// one on a pinned connection, gets a goroutine of its own), until each has
// run b.N operations. It reports base-cycles/s, impl-cycles/s and
// "x-"+name, impl's throughput over base's (higher is better). ns/op is
// the time of one pair. Each first Op runs once before the clock starts.
func Parallel(b *testing.B, name string, batch int, base, impl []Op) {
	if len(base) == 0 || len(impl) == 0 || batch < 1 {
		b.Fatalf("paired.Parallel: %d base and %d impl goroutines, batches of %d", len(base), len(impl), batch)
	}
	ctx := context.Background()
	warmUp(b, ctx, base[0], b.Name()+"/base-0", impl[0], b.Name()+"/impl-0")
	ops := [2][]Op{base, impl}
	prefixes := [2]string{"/base-", "/impl-"}
	var took [2]time.Duration
	b.ResetTimer()
	for i, done := 0, 0; done < b.N; i, done = i+1, done+batch {
		n := min(batch, b.N-done)
		order := [2]int{0, 1}
		if i%2 == 1 {
			order = [2]int{1, 0} // alternate which goes first
		}
		for _, k := range order {
			d, err := run(ctx, ops[k], b.Name()+prefixes[k], n)
			if err != nil {
				b.Fatal(err)
			}
			took[k] += d
		}
	}
	b.ReportMetric(float64(b.N)/took[0].Seconds(), "base-cycles/s")
	b.ReportMetric(float64(b.N)/took[1].Seconds(), "impl-cycles/s")
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "x-"+name)
}

// run runs n operations on len(ops) goroutines, goroutine g calling ops[g]
// on key prefix+g, and returns the wall time and the first error.
func run(ctx context.Context, ops []Op, prefix string, n int) (time.Duration, error) {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	start := time.Now()
	for g, op := range ops {
		key := fmt.Sprint(prefix, g)
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := op(ctx, key); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), first
}

func warmUp(b *testing.B, ctx context.Context, base Op, baseKey string, impl Op, implKey string) {
	b.Helper()
	if err := base(ctx, baseKey); err != nil {
		b.Fatal(err)
	}
	if err := impl(ctx, implKey); err != nil {
		b.Fatal(err)
	}
}
