package postgres_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// handOverRetry is the waiter's retry interval: what polling alone costs.
const handOverRetry = 100 * time.Millisecond

// BenchmarkHandOver measures the time from a holder's Release to a waiting
// Client.Acquire holding the lease, with release notifications (LISTEN/
// NOTIFY) and with polling alone (every handOverRetry, jittered). Each
// iteration is one hand-over; the release comes at a random moment of the
// waiter's retry cycle. It reports the median and the 90th percentile.
func BenchmarkHandOver(b *testing.B) {
	pool, err := pgxpool.New(context.Background(), testserver.Postgres(b).NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	for _, c := range []struct {
		name string
		o    leasepostgres.Options
	}{
		{"notify", leasepostgres.Options{}},
		{"polling", leasepostgres.Options{DisableNotify: true}},
	} {
		b.Run("mode="+c.name, func(b *testing.B) {
			ctx := context.Background()
			if err := leasepostgres.Migrate(ctx, pool, c.o); err != nil {
				b.Fatal(err)
			}
			s, err := leasepostgres.New(pool, c.o)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			holder, _ := lease.NewClient(s, lease.ClientOptions{Owner: "holder"})
			waiter, _ := lease.NewClient(s, lease.ClientOptions{Owner: "waiter"})
			p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute, Retry: handOverRetry, Wait: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			var took []time.Duration
			for b.Loop() {
				h, err := holder.TryAcquire(ctx, "handover", p)
				if err != nil {
					b.Fatal(err)
				}
				got := make(chan *lease.Handle)
				go func() {
					w, err := waiter.Acquire(ctx, "handover", p)
					if err != nil {
						b.Error(err)
					}
					got <- w
				}()
				// Release at a random moment of the waiter's retry cycle.
				time.Sleep(handOverRetry/2 + rand.N(handOverRetry))
				start := time.Now()
				if err := h.Release(ctx); err != nil {
					b.Fatal(err)
				}
				w := <-got
				took = append(took, time.Since(start))
				if w == nil {
					b.FailNow()
				}
				if err := w.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			slices.Sort(took)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(took[len(took)/2])/1e6, "median-ms")
			b.ReportMetric(float64(took[len(took)*9/10])/1e6, "p90-ms")
		})
	}
}
