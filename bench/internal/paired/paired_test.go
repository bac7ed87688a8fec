package paired_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/golib/lease/bench/internal/paired"
)

// counter counts an Op's calls and the keys they used.
type counter struct {
	n    atomic.Int64
	mu   sync.Mutex
	keys map[string]bool
}

func (c *counter) op(_ context.Context, key string) error {
	c.n.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys = map[string]bool{}
	}
	c.keys[key] = true
	return nil
}

// TestCounts checks that both runners call each Op once to warm up and
// then b.N times, that the two never share a key, and that the ratio is
// reported.
func TestCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(b *testing.B, base, impl paired.Op)
	}{
		{"serial", func(b *testing.B, base, impl paired.Op) { paired.Serial(b, "base", base, impl) }},
		{"parallel", func(b *testing.B, base, impl paired.Op) {
			paired.Parallel(b, "base", 100, repeat(base, 8), repeat(impl, 5))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var base, impl counter
			var lastN int64
			r := testing.Benchmark(func(b *testing.B) {
				base.n.Store(0)
				impl.n.Store(0)
				tc.run(b, base.op, impl.op)
				lastN = int64(b.N)
			})
			if got, want := base.n.Load(), lastN+1; got != want {
				t.Errorf("base ran %d times; want b.N+1 = %d", got, want)
			}
			if got, want := impl.n.Load(), lastN+1; got != want {
				t.Errorf("impl ran %d times; want b.N+1 = %d", got, want)
			}
			for k := range impl.keys {
				if base.keys[k] {
					t.Errorf("key %q used by both", k)
				}
				if !strings.Contains(k, "impl") {
					t.Errorf("impl key %q", k)
				}
			}
			if _, ok := r.Extra["x-base"]; !ok {
				t.Errorf("no x-base metric in %v", r.Extra)
			}
		})
	}
}

func repeat(op paired.Op, n int) []paired.Op {
	ops := make([]paired.Op, n)
	for i := range ops {
		ops[i] = op
	}
	return ops
}
