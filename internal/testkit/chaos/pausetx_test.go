package chaos_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
)

// waitSlack is how much longer than its context's timeout an operation
// may take to return on a loaded machine before it counts as waiting
// beyond its bound.
const waitSlack = time.Second

// TestHolderPausedInTx stops the child process (SIGSTOP; the child stops
// itself at a chosen point and the nemesis continues it) inside an open
// transaction, after its fenced write, with the row locks held, for four
// TTLs. Two forms: a plain fence.Tx, which holds the fence's row lock, and
// a guard transaction (leasepostgres.CheckGuard, then fence.Tx in it),
// which also holds the lease record FOR SHARE. The next holder's fenced
// writes (fence.Tx) and the other clients' acquire attempts then wait for
// those locks; each must return by the end of its context (the write's
// 2×OperationTimeout, the attempt's OperationTimeout), never wait for the
// paused holder. The model checks the rest; and in the guard form nobody
// may acquire the key until the paused transaction ends.
//
// Each form has a server of its own, so that the paused sessions hold no
// lock another row needs. The row logs how many server processes wait
// for a lock at the end of each pause.
func TestHolderPausedInTx(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		name := "fence.Tx"
		if guarded {
			name = "guard"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := testserver.StartPostgres(t)
			url := migrate(t, srv.NewDatabase(t))
			holderPausedInTx(t, chaos.Target{Kind: "postgres", URL: url, Guarded: guarded}, url)
		})
	}
}

func holderPausedInTx(t *testing.T, target chaos.Target, url string) {
	o := rowOptions{stopInTxEvery: 2}
	r := startRun(t, target, o)
	stopped := make(chan chaos.Op, 16)
	r.rec.Watch(func(op chaos.Op) {
		if op.Kind == chaos.KindEvent && op.Fault == chaos.EventStoppedInTx {
			stopped <- op
		}
	})
	admin, err := chaos.Pool(ctxT(t), url, "chaos-admin", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	pauses, maxWaiting := 0, 0
	for pauses == 0 || r.running() {
		var ev chaos.Op
		wait := time.Until(r.until)
		if pauses == 0 {
			wait = max(wait, 20*ttl) // the child may take a while to start
		}
		select {
		case ev = <-stopped:
		case <-time.After(wait):
			if pauses == 0 {
				t.Fatal("the child never stopped inside a transaction")
			}
			continue
		}
		d := 4 * ttl
		r.h.Fault(fmt.Sprintf("the child stopped itself inside a transaction at %d; continued %v later", ev.Call, d), false, func() {
			time.Sleep(d)
			var (
				waiting int
				states  string
			)
			if err := admin.QueryRow(ctxT(t), `SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'),
				coalesce(string_agg(DISTINCT application_name || ':' || state || ':' || coalesce(wait_event_type, '-'), ' '), '')
				FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&waiting, &states); err != nil {
				t.Error(err)
			}
			t.Logf("at the end of the pause: %d server processes wait for a lock; sessions: %s", waiting, states)
			maxWaiting = max(maxWaiting, waiting)
			if err := r.child.Resume(); err != nil {
				t.Fatal(err)
			}
		})
		pauses++
	}
	// A stop the loop did not see through: continue the child.
	_ = r.child.Resume()
	res := r.finish(o)
	ops := r.rec.Ops()
	p := r.policy.Options()
	waited := 0
	for _, op := range ops {
		if lanePrefix(op, "c1") || op.Return < op.Call {
			continue
		}
		var bound time.Duration
		switch op.Kind {
		case chaos.KindAcquire, chaos.KindRenew, chaos.KindRelease:
			bound = p.OperationTimeout
		case chaos.KindWrite:
			bound = 2 * p.OperationTimeout
		default:
			continue
		}
		took := time.Duration(op.Return-op.Call) * time.Microsecond
		if took > bound+waitSlack {
			waited++
			t.Errorf("%s took %v, more than its bound %v (+%v): %v", op.Kind, took, bound, waitSlack, op)
		}
	}
	timedOut := count(ops, func(op chaos.Op) bool {
		slow := !lanePrefix(op, "c1") && op.Outcome != chaos.OK && op.Return-op.Call >= p.OperationTimeout.Microseconds() &&
			(op.Kind == chaos.KindWrite || op.Kind == chaos.KindAcquire || op.Kind == chaos.KindRenew || op.Kind == chaos.KindRelease)
		if slow && testing.Verbose() {
			t.Logf("timed out: %s %s %s: %s", op.Kind, op.Key+op.Resource, op.Outcome, op.Err)
		}
		return slow
	})
	t.Logf("%d pauses inside a transaction; %d operations of the other clients ran into their timeout; at most %d server processes were still waiting for a lock at the end of a pause; %d checked by the model",
		pauses, timedOut, maxWaiting, res.Checked)
}
