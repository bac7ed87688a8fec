package cache_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"
	"golang.org/x/sync/singleflight"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/cache"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// parallelGoroutines is the number of goroutines of the parallel runs.
const parallelGoroutines = 64

func valkeyClient(b *testing.B, addr string) valkey.Client {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

// newCache returns a Cache on its own client, lease Store and lease
// client, in the namespace ns.
func newCache(b *testing.B, addr, ns string) *cache.Cache {
	return newCacheOpts(b, addr, ns, cache.Options{TTL: time.Hour})
}

func newCacheOpts(b *testing.B, addr, ns string, o cache.Options) *cache.Cache {
	client := valkeyClient(b, addr)
	store, err := leasevalkey.New(client, leasevalkey.Options{Prefix: ns + "-lease:"})
	if err != nil {
		b.Fatal(err)
	}
	leases, err := lease.NewClient(store, lease.ClientOptions{Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	o.Prefix = ns + "-cache:"
	c, err := cache.New(client, leases, o)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkHit compares a Cache.Get that hits (impl=cache: one GET;
// impl=cache-stalefor, a Cache with StaleFor: one MGET of value and
// freshness marker) with a plain GET of a value of the same size
// (impl=get), one goroutine at a time (mode=serial) and from 64
// goroutines (mode=parallel64). The names are key=value so that benchstat
// can put the two side by side: benchstat -col /impl -row /size,/mode.
func BenchmarkHit(b *testing.B) {
	addr := testserver.Valkey(b).Addr()
	ctx := context.Background()
	for _, size := range []int{100, 16 << 10, 1 << 20} {
		value := bytes.Repeat([]byte("v"), size)
		load := func(context.Context, lease.Token) ([]byte, error) { return value, nil }
		impls := []struct {
			name string
			get  func(b *testing.B) func() ([]byte, error)
		}{
			{"get", func(b *testing.B) func() ([]byte, error) {
				c := valkeyClient(b, addr)
				key := "bench-hit-get-" + strconv.Itoa(size)
				if err := c.Do(ctx, c.B().Set().Key(key).Value(string(value)).Build()).Error(); err != nil {
					b.Fatal(err)
				}
				return func() ([]byte, error) { return c.Do(ctx, c.B().Get().Key(key).Build()).AsBytes() }
			}},
			{"cache", func(b *testing.B) func() ([]byte, error) {
				return cacheHit(b, newCache(b, addr, "bench-hit-"+strconv.Itoa(size)), load)
			}},
			{"cache-stalefor", func(b *testing.B) func() ([]byte, error) {
				o := cache.Options{TTL: time.Hour, StaleFor: time.Hour}
				return cacheHit(b, newCacheOpts(b, addr, "bench-hit-stalefor-"+strconv.Itoa(size), o), load)
			}},
		}
		for _, impl := range impls {
			name := fmt.Sprintf("impl=%s/size=%s", impl.name, sizeName(size))
			b.Run(name+"/mode=serial", func(b *testing.B) {
				get := impl.get(b)
				b.SetBytes(int64(size))
				b.ResetTimer()
				for range b.N {
					if v, err := get(); err != nil || len(v) != size {
						b.Fatalf("%d bytes, %v", len(v), err)
					}
				}
			})
			b.Run(name+"/mode=parallel64", func(b *testing.B) {
				get := impl.get(b)
				b.SetBytes(int64(size))
				b.SetParallelism(max(1, parallelGoroutines/runtime.GOMAXPROCS(0)))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if v, err := get(); err != nil || len(v) != size {
							b.Errorf("%d bytes, %v", len(v), err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkHitPaired runs a plain GET and a Cache.Get hit of the same size
// alternately, on one goroutine (mode=serial) or on each of 64
// (mode=parallel64), and reports the ratio of their total times (x-get).
// Pairing them read by read cancels the drift of a shared machine's load,
// which swamps latencies measured one after the other. ns/op is per pair.
func BenchmarkHitPaired(b *testing.B) {
	addr := testserver.Valkey(b).Addr()
	ctx := context.Background()
	for _, size := range []int{100, 16 << 10, 1 << 20} {
		value := bytes.Repeat([]byte("v"), size)
		load := func(context.Context, lease.Token) ([]byte, error) { return value, nil }
		for _, impl := range []struct {
			name string
			o    cache.Options
		}{
			{"cache", cache.Options{TTL: time.Hour}},
			{"cache-stalefor", cache.Options{TTL: time.Hour, StaleFor: time.Hour}},
		} {
			for _, mode := range []string{"serial", "parallel64"} {
				b.Run(fmt.Sprintf("impl=%s/size=%s/mode=%s", impl.name, sizeName(size), mode), func(b *testing.B) {
					c := valkeyClient(b, addr)
					getKey := "bench-paired-get-" + strconv.Itoa(size)
					if err := c.Do(ctx, c.B().Set().Key(getKey).Value(string(value)).Build()).Error(); err != nil {
						b.Fatal(err)
					}
					get := func() ([]byte, error) { return c.Do(ctx, c.B().Get().Key(getKey).Build()).AsBytes() }
					hit := cacheHit(b, newCacheOpts(b, addr, "bench-paired-"+impl.name+"-"+strconv.Itoa(size), impl.o), load)
					var getNs, hitNs atomic.Int64
					pair := func(i int) {
						first, second := get, hit
						if i%2 == 1 {
							first, second = hit, get
						}
						t0 := time.Now()
						v1, err1 := first()
						t1 := time.Now()
						v2, err2 := second()
						t2 := time.Now()
						if err1 != nil || err2 != nil || len(v1) != size || len(v2) != size {
							b.Errorf("%d and %d bytes, %v, %v", len(v1), len(v2), err1, err2)
						}
						if i%2 == 0 {
							getNs.Add(int64(t1.Sub(t0)))
							hitNs.Add(int64(t2.Sub(t1)))
						} else {
							hitNs.Add(int64(t1.Sub(t0)))
							getNs.Add(int64(t2.Sub(t1)))
						}
					}
					b.ResetTimer()
					if mode == "serial" {
						for i := range b.N {
							pair(i)
						}
					} else {
						b.SetParallelism(max(1, parallelGoroutines/runtime.GOMAXPROCS(0)))
						b.RunParallel(func(pb *testing.PB) {
							for i := 0; pb.Next(); i++ {
								pair(i)
							}
						})
					}
					b.ReportMetric(float64(getNs.Load())/float64(b.N), "get-ns/read")
					b.ReportMetric(float64(hitNs.Load())/float64(b.N), "hit-ns/read")
					b.ReportMetric(float64(hitNs.Load())/float64(getNs.Load()), "x-get")
				})
			}
		}
	}
}

// cacheHit publishes the value of "k" in c and returns a function that
// reads it with Get, failing unless it hits.
func cacheHit(b *testing.B, c *cache.Cache, load cache.LoadFunc) func() ([]byte, error) {
	ctx := context.Background()
	if _, _, err := c.Get(ctx, "k", load); err != nil {
		b.Fatal(err)
	}
	return func() ([]byte, error) {
		v, info, err := c.Get(ctx, "k", load)
		if err == nil && info.Outcome != cache.Hit {
			err = fmt.Errorf("outcome %v, want a hit", info.Outcome)
		}
		return v, err
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// BenchmarkStampede sends 1,000 concurrent Gets of one missing key, spread
// over 4 replicas (each its own client), with a load that takes 100ms. Each
// iteration uses a new key. It reports the source loads per stampede
// (loads/op; goal 1), the time until the last of the 1,000 callers has its
// value (ms-to-serve-all), and that time divided by the load's own duration
// (x-load; 1.0 would be free coordination). impl=cache is Cache.Get;
// impl=singleflight is what a replica gets from golang.org/x/sync's
// singleflight in front of GET and SET: one load per replica.
func BenchmarkStampede(b *testing.B) {
	const (
		replicas     = 4
		callers      = 1000
		loadDuration = 100 * time.Millisecond
	)
	addr := testserver.Valkey(b).Addr()
	ctx := context.Background()
	var loads atomic.Int64
	load := func(context.Context, lease.Token) ([]byte, error) {
		loads.Add(1)
		time.Sleep(loadDuration)
		return []byte("the value"), nil
	}
	for _, impl := range []struct {
		name string
		// newGet returns one replica's read-through function.
		newGet func(b *testing.B, ns string) func(key string) ([]byte, error)
	}{
		{"cache", func(b *testing.B, ns string) func(string) ([]byte, error) {
			c := newCache(b, addr, ns)
			return func(key string) ([]byte, error) {
				v, _, err := c.Get(ctx, key, load)
				return v, err
			}
		}},
		{"singleflight", func(b *testing.B, ns string) func(string) ([]byte, error) {
			c := valkeyClient(b, addr)
			var g singleflight.Group
			return func(key string) ([]byte, error) {
				key = ns + ":" + key
				v, err := c.Do(ctx, c.B().Get().Key(key).Build()).AsBytes()
				if !valkey.IsValkeyNil(err) {
					return v, err
				}
				r, err, _ := g.Do(key, func() (any, error) {
					v, err := load(ctx, 0)
					if err != nil {
						return nil, err
					}
					return v, c.Do(ctx, c.B().Set().Key(key).Value(string(v)).Ex(time.Hour).Build()).Error()
				})
				if err != nil {
					return nil, err
				}
				return r.([]byte), nil
			}
		}},
	} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			ns := "bench-stampede-" + impl.name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			var gets []func(string) ([]byte, error)
			for range replicas {
				gets = append(gets, impl.newGet(b, ns))
			}
			// Warm up: connect and load the scripts on every replica.
			for i, get := range gets {
				if _, err := get("warm-up-" + strconv.Itoa(i)); err != nil {
					b.Fatal(err)
				}
			}
			loads.Store(0)
			var total time.Duration
			b.ResetTimer()
			for i := range b.N {
				key := "hot-" + strconv.Itoa(i)
				var (
					wg, ready sync.WaitGroup
					start     = make(chan struct{})
				)
				wg.Add(callers)
				ready.Add(callers)
				for j := range callers {
					go func() {
						defer wg.Done()
						ready.Done()
						<-start
						if v, err := gets[j%replicas](key); err != nil || string(v) != "the value" {
							b.Errorf("Get = %q, %v", v, err)
						}
					}()
				}
				ready.Wait()
				t0 := time.Now()
				close(start)
				wg.Wait()
				total += time.Since(t0)
			}
			b.StopTimer()
			perRun := total / time.Duration(b.N)
			b.ReportMetric(float64(loads.Load())/float64(b.N), "loads/op")
			b.ReportMetric(float64(perRun)/float64(time.Millisecond), "ms-to-serve-all")
			b.ReportMetric(float64(perRun)/float64(loadDuration), "x-load")
		})
	}
}
