package valkey_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	valkey "github.com/valkey-io/valkey-go"
	"github.com/valkey-io/valkey-go/valkeylock"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/bench/internal/paired"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// ttl is the lease TTL of every cycle; cycles release long before it.
const ttl = 10 * time.Second

// parallelGoroutines is the number of goroutines of the parallel runs.
const parallelGoroutines = 64

// A cycler runs acquire→release cycles; newCycle returns one worker's
// cycle function, called with that worker's own key.
type cycler struct {
	name     string
	newCycle func(b *testing.B, addr string) func(ctx context.Context, key string) error
}

var noop = valkey.NewLuaScript("return 1")

func valkeyClient(b *testing.B, addr string) valkey.Client {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

func goredisClient(b *testing.B, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { c.Close() })
	return c
}

var cyclers = []cycler{
	{"floor", func(b *testing.B, addr string) func(context.Context, string) error {
		c := valkeyClient(b, addr)
		return func(ctx context.Context, key string) error {
			if err := noop.Exec(ctx, c, []string{key}, nil).Error(); err != nil {
				return err
			}
			return noop.Exec(ctx, c, []string{key}, nil).Error()
		}
	}},
	{"leasevalkey", func(b *testing.B, addr string) func(context.Context, string) error {
		s, err := leasevalkey.New(valkeyClient(b, addr), leasevalkey.Options{Prefix: "bench:"})
		if err != nil {
			b.Fatal(err)
		}
		lc, err := lease.NewClient(s, lease.ClientOptions{Owner: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		// A generous OperationTimeout: on a loaded machine the default
		// (TTL/10) fails a cycle now and then, which ends the benchmark.
		p, err := lease.NewPolicy(lease.PolicyOptions{TTL: ttl, OperationTimeout: 2 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, key string) error {
			h, err := lc.TryAcquire(ctx, key, p)
			if err != nil {
				return err
			}
			return h.Release(ctx)
		}
	}},
	{"leasevalkey-backend", func(b *testing.B, addr string) func(context.Context, string) error {
		s, err := leasevalkey.New(valkeyClient(b, addr), leasevalkey.Options{Prefix: "bench:"})
		if err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		return func(ctx context.Context, key string) error {
			nonce := benchNonce(n.Add(1))
			tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: "bench", Nonce: nonce, TTL: ttl})
			if err != nil {
				return err
			}
			return s.Release(ctx, lease.Acquisition{Key: key, Owner: "bench", Nonce: nonce, Token: tok})
		}
	}},
	{"redislock", func(b *testing.B, addr string) func(context.Context, string) error {
		locks := redislock.New(goredisClient(b, addr))
		return func(ctx context.Context, key string) error {
			l, err := locks.Obtain(ctx, key, ttl, nil)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}
	}},
	{"redsync", func(b *testing.B, addr string) func(context.Context, string) error {
		rs := redsync.New(redsyncgoredis.NewPool(goredisClient(b, addr)))
		return func(ctx context.Context, key string) error {
			m := rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1), redsync.WithTimeoutFactor(0.2))
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			_, err := m.UnlockContext(ctx)
			return err
		}
	}},
	{"valkeylock", func(b *testing.B, addr string) func(context.Context, string) error {
		l, err := valkeylock.NewLocker(valkeylock.LockerOption{
			ClientOption: valkey.ClientOption{InitAddress: []string{addr}},
			KeyValidity:  ttl,
			KeyMajority:  1,           // one key per lock, like the others
			TryNextAfter: time.Second, // the default 20ms fails under load at 64 goroutines
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(l.Close)
		return func(ctx context.Context, key string) error {
			_, cancel, err := l.TryWithContext(ctx, key)
			if err != nil {
				return err
			}
			cancel()
			return nil
		}
	}},
}

// benchNonce returns the nonce of the bare backend's n-th acquisition: as
// long as lease.Client's secrets (26 characters), so that both send and
// store the same bytes and the ratio measures the Client's layer, not the
// length of a secret the backend's contract requires (AcquireRequest.Nonce
// is a random, unguessable string). It is a counter, not a secret, which
// only a benchmark may use. One allocation, as the counter's string was.
func benchNonce(n int64) string {
	var b [26]byte
	for i := range b {
		b[i] = 'A'
	}
	strconv.AppendInt(b[:0:26-13], n, 36) // at most 13 base-36 digits
	return string(b[:])
}

// BenchmarkCycle measures one acquire→release cycle of a free lock, one
// goroutine at a time (mode=serial) and from 64 goroutines with a key each
// (mode=parallel64). ns/op is per cycle; cycles/s is the throughput. The
// names are key=value so that benchstat can put the implementations side
// by side: benchstat -col /impl -row /mode.
func BenchmarkCycle(b *testing.B) {
	addr := testserver.Valkey(b).Addr()
	for _, c := range cyclers {
		b.Run("impl="+c.name+"/mode=serial", func(b *testing.B) {
			cycle := c.newCycle(b, addr)
			ctx := context.Background()
			key := "bench-" + c.name + "-serial"
			if err := cycle(ctx, key); err != nil { // warm up: connect, load scripts
				b.Fatal(err)
			}
			srv := newServerCPU(b, addr)
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if err := cycle(ctx, key); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "cycles/s")
			srv.report(b)
		})
		b.Run("impl="+c.name+"/mode=parallel64", func(b *testing.B) {
			cycle := c.newCycle(b, addr)
			ctx := context.Background()
			if err := cycle(ctx, "bench-warm-up"); err != nil {
				b.Fatal(err)
			}
			var worker atomic.Int64
			b.SetParallelism(max(1, parallelGoroutines/runtime.GOMAXPROCS(0)))
			srv := newServerCPU(b, addr)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("bench-%s-parallel-%d", c.name, worker.Add(1))
				for pb.Next() {
					if err := cycle(ctx, key); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "cycles/s")
			srv.report(b)
		})
	}
}

// serverCPU measures the CPU time valkey-server and this process spend,
// per cycle: at 64 goroutines the two share the machine's cores, so their
// sum decides the throughput.
type serverCPU struct {
	c           valkey.Client
	start       float64
	clientStart time.Duration
}

func newServerCPU(b *testing.B, addr string) *serverCPU {
	s := &serverCPU{c: valkeyClient(b, addr)}
	s.start = s.seconds(b)
	s.clientStart = cpuTime()
	return s
}

// seconds returns the server's used_cpu_sys + used_cpu_user.
func (s *serverCPU) seconds(b *testing.B) float64 {
	info, err := s.c.Do(context.Background(), s.c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for line := range strings.SplitSeq(info, "\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
				n, _ := strconv.ParseFloat(v, 64)
				total += n
			}
		}
	}
	return total
}

// report reports the server's and this process's CPU time per cycle since
// s was made.
func (s *serverCPU) report(b *testing.B) {
	client := float64((cpuTime() - s.clientStart).Microseconds())
	b.ReportMetric((s.seconds(b)-s.start)*1e6/float64(b.N), "server-us/cycle")
	b.ReportMetric(client/float64(b.N), "client-us/cycle")
}

// renewalCounter counts successful renewals.
type renewalCounter struct{ renewed, failed atomic.Int64 }

func (o *renewalCounter) Observe(e lease.Event) {
	switch e.(type) {
	case *lease.Renewed:
		o.renewed.Add(1)
	case *lease.RenewFailed, *lease.Lost:
		o.failed.Add(1)
	}
}

// BenchmarkManagedRenewal holds 10,000 leases in one process, each renewed
// by its own Managed every second, and reports the process's CPU time per
// second of wall time, and allocations per renewal. It runs for a fixed
// time whatever b.N is; run it with -benchtime=1x.
func BenchmarkManagedRenewal(b *testing.B) {
	const (
		leases  = 10_000
		measure = 10 * time.Second
	)
	addr := testserver.Valkey(b).Addr()
	s, err := leasevalkey.New(valkeyClient(b, addr), leasevalkey.Options{Prefix: "bench-managed:"})
	if err != nil {
		b.Fatal(err)
	}
	obs := &renewalCounter{}
	lc, _ := lease.NewClient(s, lease.ClientOptions{Owner: "bench", Observer: obs})
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 3 * time.Second, RenewEvery: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	managed := make([]*lease.Managed, 0, leases)
	for i := range leases {
		h, err := lc.TryAcquire(ctx, "lease-"+strconv.Itoa(i), p)
		if err != nil {
			b.Fatal(err)
		}
		m, err := h.StartManaged(ctx)
		if err != nil {
			b.Fatal(err)
		}
		managed = append(managed, m)
	}
	time.Sleep(2 * time.Second) // let the renewals spread out
	b.ResetTimer()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0, renewed0, start := cpuTime(), obs.renewed.Load(), time.Now()
	time.Sleep(measure)
	cpu1, renewed1, wall := cpuTime(), obs.renewed.Load(), time.Since(start)
	runtime.ReadMemStats(&ms1)
	b.StopTimer()
	for _, m := range managed {
		_ = m.Stop(ctx)
		_ = m.Handle().Release(ctx)
	}
	renewals := float64(renewed1 - renewed0)
	b.ReportMetric(renewals/wall.Seconds(), "renewals/s")
	b.ReportMetric((cpu1-cpu0).Seconds()/wall.Seconds()*1000, "cpu-ms/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/renewals, "allocs/renewal")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/renewals, "B/renewal")
	b.ReportMetric(float64(obs.failed.Load()), "failures")
}

// cpuTime returns the user and system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// baseline is the cycler every other one is compared with: the bare
// backend, without lease.Client.
const baseline = "leasevalkey-backend"

// BenchmarkParallelPaired runs each cycler but the floor and the baseline
// in alternating batches with the baseline, parallelGoroutines goroutines
// each, and reports its throughput over the baseline's (x-backend, higher
// is better): lease.Client's cost over the bare backend, and each peer's
// throughput in the same units. ns/op is per pair.
func BenchmarkParallelPaired(b *testing.B) {
	addr := testserver.Valkey(b).Addr()
	i := slices.IndexFunc(cyclers, func(c cycler) bool { return c.name == baseline })
	if i < 0 {
		b.Fatalf("no cycler %q", baseline)
	}
	base := cyclers[i]
	for _, c := range cyclers {
		if c.name == baseline || c.name == "floor" {
			continue
		}
		b.Run("impl="+c.name, func(b *testing.B) {
			baseOp, implOp := paired.Op(base.newCycle(b, addr)), paired.Op(c.newCycle(b, addr))
			baseOps, implOps := make([]paired.Op, parallelGoroutines), make([]paired.Op, parallelGoroutines)
			for g := range parallelGoroutines {
				baseOps[g], implOps[g] = baseOp, implOp
			}
			paired.Parallel(b, "backend", 32*parallelGoroutines, baseOps, implOps)
		})
	}
}
