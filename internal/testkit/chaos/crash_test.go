package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// TestValkeyKillNoPersistence kills the lease server with SIGKILL and
// restarts it empty, again and again. Every lease is forgotten, so holders
// can be superseded early (that is not guaranteed, and the fault is marked
// as losing data), but tokens keep rising: no token is ever issued twice
// for a key, and the fences, on a second server, keep every stale write
// out.
func TestValkeyKillNoPersistence(t *testing.T) {
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	target := valkeyTarget(srv.Addr())
	target.FenceAddr = testserver.Valkey(t).Addr()
	r := startRun(t, target, rowOptions{})
	for r.running() {
		r.pause(500*time.Millisecond, 2*ttl)
		d := time.Duration(r.rng.Int64N(int64(ttl / 2)))
		r.h.Fault(fmt.Sprintf("kill -9 valkey-server, restart it empty after %v", d), true, func() {
			srv.Kill()
			time.Sleep(d)
			srv.Restart()
		})
	}
	r.finish(rowOptions{})
	r.withoutDataLoss()
}

// TestValkeyKillAOF kills the lease server with SIGKILL and restarts it
// on its append-only file (appendfsync always): every acknowledged grant,
// renewal and release survives, so the fault is not marked as losing data
// and the model holds the server to every lease it granted before the
// crash. The fences live on the same server.
func TestValkeyKillAOF(t *testing.T) {
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{AppendOnly: true})
	target := valkeyTarget(srv.Addr())
	survives(t, target, func() { srv.Kill(); srv.Restart() })
	r := startRun(t, target, rowOptions{})
	for r.running() {
		r.pause(500*time.Millisecond, 2*ttl)
		d := time.Duration(r.rng.Int64N(int64(ttl / 2)))
		r.h.Fault(fmt.Sprintf("kill -9 valkey-server, restart it on its AOF after %v", d), false, func() {
			srv.Kill()
			time.Sleep(d)
			srv.Restart()
		})
	}
	r.finish(rowOptions{})
}

// TestValkeyFailover fails the lease server over to a replica that missed
// writes: the replica's link to the primary is cut, the clients go on
// acquiring and renewing on the primary for a while, the primary is
// killed, the replica is promoted with REPLICAOF NO ONE and the clients'
// proxy is pointed at it. Then the old primary comes back empty as the new
// replica, and the next failover goes the other way.
//
// Leases granted or renewed after the cut are lost (the fault is marked as
// losing data): the promoted replica may grant a key that a client still
// believes it holds. What must hold: no token is issued twice (the
// promoted server's clock is past every token of the lost primary), and
// the fences, on a third server, reject every write under the lost lease
// once the new holder has written.
func TestValkeyFailover(t *testing.T) {
	pair, target := startValkeyPair(t)
	r := startRun(t, target, rowOptions{})
	for r.running() {
		r.pause(ttl, 2*ttl)
		pair.failOver(t, r)
	}
	r.finish(rowOptions{})
	r.withoutDataLoss()
}

// valkeyPair is a Valkey primary and its replica, the replica's link to
// the primary through a proxy, and the clients' proxy in front of the
// primary: the rig of TestValkeyFailover.
type valkeyPair struct {
	primary, replica *testserver.ValkeyServer
	repl             *chaos.Proxy // the replica's link to the primary
	front            *chaos.Proxy // the clients'
}

// startValkeyPair starts a valkeyPair and returns it with a target on
// its front proxy, with the fences on a third server.
func startValkeyPair(t *testing.T) (*valkeyPair, chaos.Target) {
	t.Helper()
	opts := testserver.ValkeyOptions{ExtraArgs: []string{"--repl-diskless-sync-delay", "0"}}
	p := &valkeyPair{primary: testserver.StartValkey(t, opts), replica: testserver.StartValkey(t, opts)}
	p.repl, p.front = newProxy(t, p.primary.Addr()), newProxy(t, p.primary.Addr())
	replicate(t, p.replica.Addr(), p.repl.Addr())
	target := valkeyTarget(p.front.Addr())
	target.FenceAddr = testserver.Valkey(t).Addr()
	return p, target
}

// failOver fails p over as a fault of r marked as losing data: the
// replica's link cut, 0.5–1.5 TTL later the primary killed, the replica
// promoted and the clients' proxy pointed at it. Then the old primary
// comes back empty as the new replica.
func (p *valkeyPair) failOver(t *testing.T, r *run) {
	t.Helper()
	lag := ttl/2 + time.Duration(r.rng.Int64N(int64(ttl)))
	r.h.Fault(fmt.Sprintf("cut the replica's link, %v later kill -9 the primary and promote the replica", lag), true, func() {
		if err := p.repl.SetUpstream("127.0.0.1:1"); err != nil { // nothing listens there
			t.Fatal(err)
		}
		time.Sleep(lag)
		p.primary.Kill()
		do(t, p.replica.Addr(), "REPLICAOF", "NO", "ONE")
		if err := p.front.SetUpstream(p.replica.Addr()); err != nil {
			t.Fatal(err)
		}
	})
	p.primary.Restart() // empty: no persistence
	if err := p.repl.SetUpstream(p.replica.Addr()); err != nil {
		t.Fatal(err)
	}
	replicate(t, p.primary.Addr(), p.repl.Addr())
	p.primary, p.replica = p.replica, p.primary
}

// replicate makes the server at addr a replica of the server behind
// source and waits until the link is up.
func replicate(t *testing.T, addr, source string) {
	t.Helper()
	host, port, _ := strings.Cut(source, ":")
	do(t, addr, "REPLICAOF", host, port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info := do(t, addr, "INFO", "replication")
		if strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not replicate %s within 30s:\n%s", addr, source, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// do runs one command on the Valkey server at addr and returns its reply
// as text.
func do(t *testing.T, addr string, args ...string) string {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true, DisableRetry: true})
	if err != nil {
		t.Fatalf("connect to %s: %v", addr, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg, err := c.Do(ctx, c.B().Arbitrary(args...).Build()).ToMessage()
	if err != nil {
		t.Fatalf("%s on %s: %v", args, addr, err)
	}
	s, _ := msg.ToString()
	return s
}

// TestPostgresCrash stops the database server the way a crash does (pg_ctl
// stop -m immediate: no checkpoint, every connection cut) and starts it
// again, which recovers from the write-ahead log. Every committed grant,
// renewal and release survives, so the fault is not marked as losing data:
// the model holds the server to every lease it acknowledged, and tokens
// keep rising.
func TestPostgresCrash(t *testing.T) {
	srv := testserver.StartPostgres(t)
	target := chaos.Target{Kind: "postgres", URL: migrate(t, srv.NewDatabase(t))}
	survives(t, target, func() { srv.StopImmediate(); srv.Start() })
	r := startRun(t, target, rowOptions{})
	for r.running() {
		r.pause(500*time.Millisecond, 2*ttl)
		d := time.Duration(r.rng.Int64N(int64(ttl / 2)))
		r.h.Fault(fmt.Sprintf("stop postgres -m immediate, start it after %v", d), false, func() {
			srv.StopImmediate()
			time.Sleep(d)
			srv.Start()
		})
	}
	r.finish(rowOptions{})
}

// survives grants a lease for a minute, crashes the server with crash, and
// checks that the lease came back: the same holder and token, still held,
// with no more time left than before, and that the next token is higher.
func survives(t *testing.T, target chaos.Target, crash func()) {
	t.Helper()
	ctx := ctxT(t)
	b, _, closeFn, err := target.Open(ctx, "chaos-survives")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := b.Acquire(ctx, lease.AcquireRequest{Key: "durable", Owner: "before", Nonce: "n1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	before, err := b.Inspect(ctx, "durable")
	if err != nil {
		t.Fatal(err)
	}
	closeFn()
	crash()
	b, _, closeFn, err = target.Open(ctx, "chaos-survives")
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	after, err := b.Inspect(ctx, "durable")
	if err != nil || !after.Held || after.Owner != "before" || after.Token != tok || after.Remaining > before.Remaining {
		t.Fatalf("after the crash the lease is %+v, %v; want it held by %q with token %d and at most %v left", after, err, "before", tok, before.Remaining)
	}
	if _, err := b.Acquire(ctx, lease.AcquireRequest{Key: "durable", Owner: "after", Nonce: "n2", TTL: time.Minute}); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("acquire after the crash: %v, want ErrNotAcquired", err)
	}
	if err := b.Release(ctx, lease.Acquisition{Key: "durable", Owner: "before", Nonce: "n1", Token: tok}); err != nil {
		t.Fatalf("release after the crash: %v", err)
	}
	next, err := b.Acquire(ctx, lease.AcquireRequest{Key: "durable", Owner: "after", Nonce: "n2", TTL: time.Minute})
	if err != nil || next <= tok {
		t.Fatalf("acquire after the release: token %d, %v; want above %d", next, err, tok)
	}
}

// TestValkeySplitBrain gives the lease store two live primaries for a
// while, then promotes one: the replica's link to the primary is cut, the
// replica is promoted with REPLICAOF NO ONE and the child's clients are
// pointed at it, while the goroutine clients go on with the old primary
// for one to two TTLs. Then every client goes to the new primary, and the
// old one is killed and comes back empty as its replica. During the split
// each primary grants leases the other does not know of, so two clients
// may hold one lease at once (the fault is marked as losing data, and the
// acquisitions it touched are left out of the model, see Op.SplitBrain).
// What must hold: no token is granted twice (both primaries issue
// max(last+1, their clock in µs) on one clock), and the fences, on a third
// server, refuse every write under the lease that lost: whichever holder
// has the lower token is fenced out once the other has written.
func TestValkeySplitBrain(t *testing.T) {
	opts := testserver.ValkeyOptions{ExtraArgs: []string{"--repl-diskless-sync-delay", "0"}}
	primary, replica := testserver.StartValkey(t, opts), testserver.StartValkey(t, opts)
	repl := newProxy(t, primary.Addr())  // the replica's link to the primary
	front := newProxy(t, primary.Addr()) // the goroutine clients'
	side := newProxy(t, primary.Addr())  // the child's
	replicate(t, replica.Addr(), repl.Addr())
	target := valkeyTarget(front.Addr())
	target.FenceAddr = testserver.Valkey(t).Addr()
	childTarget := target
	childTarget.Addr = side.Addr()
	r := startRun(t, target, rowOptions{childTarget: &childTarget})
	splits := 0
	for r.running() {
		r.pause(ttl, 2*ttl)
		d := ttl + time.Duration(r.rng.Int64N(int64(ttl)))
		op := chaos.Op{Fault: fmt.Sprintf("split brain for %v: the replica promoted and serving the child, the old primary serving the others; then all on the new primary", d),
			LostData: true, SplitBrain: true}
		r.h.FaultOp(op, func() {
			if err := repl.SetUpstream("127.0.0.1:1"); err != nil { // nothing listens there
				t.Fatal(err)
			}
			do(t, replica.Addr(), "REPLICAOF", "NO", "ONE")
			if err := side.SetUpstream(replica.Addr()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(d)
			if err := front.SetUpstream(replica.Addr()); err != nil {
				t.Fatal(err)
			}
			primary.Kill()
		})
		splits++
		primary.Restart() // empty: no persistence
		if err := repl.SetUpstream(replica.Addr()); err != nil {
			t.Fatal(err)
		}
		replicate(t, primary.Addr(), repl.Addr())
		primary, replica = replica, primary
	}
	res := r.finish(rowOptions{})
	ops := r.rec.Ops()
	late := count(ops, func(op chaos.Op) bool { return op.Kind == chaos.KindWrite && op.Outcome == chaos.Stale })
	during := func(side string) int {
		return count(ops, func(op chaos.Op) bool {
			if op.Kind != chaos.KindAcquire || op.Outcome != chaos.OK || !lanePrefix(op, side) {
				return false
			}
			return count(ops, func(f chaos.Op) bool { return f.SplitBrain && f.Call <= op.Call && op.Return <= f.Return }) > 0
		})
	}
	t.Logf("%d splits; grants during them: %d to the goroutine clients (the old primary's side), %d to the child (the promoted replica's); %d writes refused as stale; %d operations checked by the model",
		splits, during("p"), during("c1"), late, res.Checked)
}
