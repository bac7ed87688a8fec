package chaos_test

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
)

// backend is one kind of server the network rows run on.
type backend struct {
	name string
	// target returns a target whose clients reach the server through
	// the proxy it also returns, and the server's database URL (for
	// PostgreSQL; "" for Valkey), not proxied.
	target func(t *testing.T) (chaos.Target, *chaos.Proxy, string)
}

var networkBackends = []backend{
	{"valkey", func(t *testing.T) (chaos.Target, *chaos.Proxy, string) {
		p := newProxy(t, testserver.Valkey(t).Addr())
		return valkeyTarget(p.Addr()), p, ""
	}},
	{"postgres", func(t *testing.T) (chaos.Target, *chaos.Proxy, string) {
		direct := postgresDB(t)
		u, err := url.Parse(direct)
		if err != nil {
			t.Fatal(err)
		}
		p := newProxy(t, u.Host)
		u.Host = p.Addr()
		return chaos.Target{Kind: "postgres", URL: u.String()}, p, direct
	}},
}

func newProxy(t *testing.T, upstream string) *chaos.Proxy {
	t.Helper()
	p, err := chaos.NewProxy(t.Name(), upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// columnsBackend is PostgreSQL with the resources fenced by columns of
// their rows, written with fence.Update and fence.Upsert.
var columnsBackend = backend{"postgres-columns", func(t *testing.T) (chaos.Target, *chaos.Proxy, string) {
	target, p, direct := networkBackends[1].target(t)
	target.Columns = true
	return target, p, direct
}}

// eachBackend runs row on every network backend, as parallel subtests:
// the rows wait on the network far more than they compute.
func eachBackend(t *testing.T, row func(t *testing.T, r *run, p *chaos.Proxy, direct string)) {
	eachBackendOf(t, networkBackends, row)
}

// eachBackendOf runs row on each of backends, as parallel subtests.
func eachBackendOf(t *testing.T, backends []backend, row func(t *testing.T, r *run, p *chaos.Proxy, direct string)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			target, p, direct := b.target(t)
			row(t, startRun(t, target, rowOptions{}), p, direct)
		})
	}
}

// toxic adds toxics to p, failing t if it can't.
func toxic(t *testing.T, p *chaos.Proxy, toxics ...chaos.Toxic) {
	t.Helper()
	if err := p.Add(toxics...); err != nil {
		t.Fatal(err)
	}
}

// heal removes p's toxics, failing t if it can't.
func heal(t *testing.T, p *chaos.Proxy) {
	t.Helper()
	if err := p.Heal(); err != nil {
		t.Error(err)
	}
}

// TestLatencyAboveTTL delays every byte, both ways, so that a round trip
// takes longer than the TTL. Every call times out with an unknown outcome
// (and may still be applied later); managed renewal gives up by the local
// deadline, and nobody holds a lease the backend gave to someone else.
func TestLatencyAboveTTL(t *testing.T) {
	eachBackend(t, func(t *testing.T, r *run, p *chaos.Proxy, _ string) {
		for r.runningForUnknowns() {
			r.pause(300*time.Millisecond, ttl)
			lat := ttl.Milliseconds() * 3 / 4 // each way: 1.5×TTL a round trip
			d := 2*ttl + time.Duration(r.rng.Int64N(int64(ttl)))
			r.h.Fault(fmt.Sprintf("latency %dms each way for %v", lat, d), false, func() {
				toxic(t, p, chaos.Both("latency", map[string]any{"latency": lat, "jitter": lat / 10})...)
				defer heal(t, p)
				time.Sleep(d)
			})
		}
		r.finish(rowOptions{unknowns: true, deadlines: true})
	})
}

// TestPartition blackholes the connections (toxiproxy's timeout toxic
// with timeout 0 on both streams: bytes are dropped, connections stay
// open) for longer than the TTL. Calls end with unknown outcomes; holders
// drop their leases by their local deadline; after the partition heals,
// every key can be had again.
//
// The toxic drops bytes from the middle of a TCP stream, which a real
// network never does (TCP retransmits them, or the connection dies), and
// valkey-go matches replies to requests by order; healing closes the
// proxy's connections (see chaos.Proxy), as the kernel closes them after a
// partition of that length.
func TestPartition(t *testing.T) {
	eachBackend(t, func(t *testing.T, r *run, p *chaos.Proxy, _ string) {
		for r.runningForUnknowns() {
			r.pause(300*time.Millisecond, ttl)
			d := ttl + time.Duration(r.rng.Int64N(int64(ttl)))
			r.h.Fault(fmt.Sprintf("blackhole for %v", d), false, func() {
				toxic(t, p, chaos.Both("timeout", map[string]any{"timeout": 0})...)
				defer heal(t, p)
				time.Sleep(d)
			})
		}
		r.finish(rowOptions{unknowns: true, deadlines: true})
	})
}

// TestConnectionReset cuts connections in the middle of operations: a TCP
// reset after a random delay (reset_peer), a connection closed after a
// random number of bytes (limit_data), and on PostgreSQL
// pg_terminate_backend of a random client's sessions. Afterwards no lease
// may stay held longer than its TTL, and no goroutine may be left behind
// (TestMain checks).
func TestConnectionReset(t *testing.T) {
	eachBackend(t, func(t *testing.T, r *run, p *chaos.Proxy, direct string) {
		for r.running() {
			r.pause(100*time.Millisecond, ttl/2)
			d := time.Duration(r.rng.Int64N(int64(ttl)))
			switch n := r.rng.IntN(3); {
			case n == 0:
				tx := chaos.Toxic{Type: "reset_peer", Stream: []string{"upstream", "downstream"}[r.rng.IntN(2)],
					Attributes: map[string]any{"timeout": r.rng.IntN(30)}}
				r.h.Fault(fmt.Sprintf("%v for %v", tx, d), false, func() {
					toxic(t, p, tx)
					defer heal(t, p)
					time.Sleep(d)
				})
			case n == 1:
				tx := chaos.Toxic{Type: "limit_data", Stream: []string{"upstream", "downstream"}[r.rng.IntN(2)],
					Attributes: map[string]any{"bytes": 50 + r.rng.IntN(2000)}}
				r.h.Fault(fmt.Sprintf("%v for %v", tx, d), false, func() {
					toxic(t, p, tx)
					defer heal(t, p)
					time.Sleep(d)
				})
			case direct != "":
				terminate(t, r, direct)
			default:
				r.h.Fault("close every connection", false, func() {
					if err := p.Cut(); err != nil {
						t.Error(err)
					}
				})
			}
		}
		noLingeringLeases(t, r)
		r.finish(rowOptions{})
	})
}

// terminate runs pg_terminate_backend on the sessions of a random client.
func terminate(t *testing.T, r *run, direct string) {
	admin, err := chaos.Pool(ctxT(t), direct, "chaos-admin", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	names := []string{"chaos-p0", "chaos-p1", "chaos-p2", "chaos-c1-0"}
	name := names[r.rng.IntN(len(names))]
	r.h.Fault("pg_terminate_backend the sessions of "+name, false, func() {
		_, err := admin.Exec(ctxT(t), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name = $1 AND datname = current_database()`, name)
		if err != nil {
			t.Error(err)
		}
	})
}

// noLingeringLeases stops the run's clients (without the releases they
// could not make) and checks, on the backend's own clock, that no key is
// held for more than the TTL from then on, and that each is free again
// within a few TTLs.
func noLingeringLeases(t *testing.T, r *run) {
	t.Helper()
	if r.child != nil {
		if err := r.child.Stop(30 * time.Second); err != nil {
			t.Error(err)
		}
		r.childDone = true
	}
	if err := r.h.Stop(); err != nil {
		t.Error(err)
	}
	b, _, closeFn, err := r.target.Open(ctxT(t), "chaos-inspect")
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	for _, key := range keys {
		deadline := time.Now().Add(5 * ttl)
		for {
			rec, err := b.Inspect(ctxT(t), key)
			switch {
			case err != nil:
				t.Fatalf("inspect %s: %v", key, err)
			case rec.Remaining > ttl+time.Millisecond:
				t.Errorf("key %s is held by %s/%d for another %v, more than its TTL", key, rec.Owner, rec.Token, rec.Remaining)
			case !rec.Held:
			case time.Now().After(deadline):
				t.Errorf("key %s is still held by %s/%d, %v after the clients stopped", key, rec.Owner, rec.Token, 5*ttl)
			default:
				time.Sleep(rec.Remaining + time.Millisecond)
				continue
			}
			break
		}
	}
}

// TestSlowWire slices every message into small fragments with delays and
// limits the bandwidth, both ways, for the whole run: every result must
// still be right.
func TestSlowWire(t *testing.T) {
	eachBackend(t, func(t *testing.T, r *run, p *chaos.Proxy, _ string) {
		r.h.Fault("slicer and bandwidth for the whole run", false, func() {
			toxic(t, p, chaos.Both("slicer", map[string]any{"average_size": 16, "size_variation": 8, "delay": 200})...)
			toxic(t, p, chaos.Both("bandwidth", map[string]any{"rate": 64})...)
		})
		for r.running() {
			time.Sleep(100 * time.Millisecond)
		}
		heal(t, p)
		res := r.finish(rowOptions{})
		ops := r.rec.Ops()
		granted := count(ops, func(op chaos.Op) bool { return op.Kind == chaos.KindAcquire && op.Outcome == chaos.OK })
		written := count(ops, func(op chaos.Op) bool { return op.Kind == chaos.KindWrite && op.Outcome == chaos.OK })
		if granted == 0 || written == 0 {
			t.Errorf("over the slow wire, %d grants and %d writes went through: %v", granted, written, res)
		}
	})
}

// TestRepliesLost delivers requests and drops their replies (toxiproxy's
// timeout toxic with timeout 0 on the downstream stream only) for two to
// three TTLs: every grant, renewal, release and fenced write goes through
// on the server, and its client never hears of it. Their outcomes must be
// recorded as unknown, never as failed; the model then allows either; and
// there must never be two valid holders: a grant nobody heard of holds the
// key, by nobody, until its TTL passes. On PostgreSQL the row runs twice:
// with the fences table (fence.Tx) and with fence columns on the rows
// (fence.Update and fence.Upsert, see chaos.ColumnStore), whose
// statements commit on their own, so that an error must say "unknown"
// whenever the statement may have been applied.
func TestRepliesLost(t *testing.T) {
	eachBackendOf(t, append(slices.Clone(networkBackends), columnsBackend), func(t *testing.T, r *run, p *chaos.Proxy, _ string) {
		for r.runningForUnknowns() {
			r.pause(300*time.Millisecond, ttl)
			d := 2*ttl + time.Duration(r.rng.Int64N(int64(ttl)))
			r.h.Fault(fmt.Sprintf("replies dropped (downstream blackhole) for %v", d), false, func() {
				toxic(t, p, chaos.Toxic{Type: "timeout", Stream: "downstream", Attributes: map[string]any{"timeout": 0}})
				defer heal(t, p)
				time.Sleep(d)
			})
		}
		res := r.finish(rowOptions{unknowns: true, deadlines: true})
		ops := r.rec.Ops()
		failed := count(ops, func(op chaos.Op) bool {
			return op.Outcome == chaos.Failed && (op.Kind == chaos.KindAcquire || op.Kind == chaos.KindRenew || op.Kind == chaos.KindRelease)
		})
		why := map[string]bool{}
		for _, op := range ops {
			if op.Outcome == chaos.Failed && op.Kind == chaos.KindAcquire && len(why) < 3 {
				why[op.Err] = true
			}
		}
		t.Logf("%d lease calls reported as failed (nothing applied) while replies were lost, such as %q; %d operations checked",
			failed, slices.Sorted(maps.Keys(why)), res.Checked)
	})
}
