package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// TestForcedReleases runs an operator beside the clients: at random times
// it force-releases one of the keys in a burst of up to 20 calls, each
// half the time whichever acquisition holds it (token 0), half the time
// only the holder it has just inspected (by token). Every call goes into the history, so the model holds what
// ForceRelease reports to what happened: a holder it names as ended must
// be the current acquisition and must never renew or release afterwards,
// a "nothing held" must come while no lease certainly held the key, and a
// refusal by token must not name a current holder. The ended holders'
// writes are fenced out once the next holder writes, as always.
func TestForcedReleases(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		target func(t *testing.T) chaos.Target
	}{
		{"valkey", func(t *testing.T) chaos.Target { return valkeyTarget(testserver.Valkey(t).Addr()) }},
		{"postgres", func(t *testing.T) chaos.Target { return chaos.Target{Kind: "postgres", URL: postgresDB(t)} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			forcedReleases(t, c.target(t))
		})
	}
}

func forcedReleases(t *testing.T, target chaos.Target) {
	ctx := context.Background()
	raw, _, closeFn, err := target.Open(ctx, "chaos-operator")
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	r := startRun(t, target, rowOptions{})
	op := chaos.NewRecordingBackend(raw, r.rec, chaos.NewLanes("op").New())
	calls, ended := 0, 0
	for r.running() {
		r.pause(10*time.Millisecond, ttl/4)
		// A burst of forced releases of one key: each frees it, a waiting
		// client takes it at once (woken by the release), and the next
		// force races that grant, where a force that reports a holder it
		// did not end would show.
		key := keys[r.rng.IntN(len(keys))]
		for range 1 + r.rng.IntN(20) {
			var token lease.Token
			if r.rng.IntN(2) == 0 {
				rec, err := raw.Inspect(ctxT(t), key)
				if err != nil || !rec.Held {
					continue
				}
				token = rec.Token
			}
			octx, cancel := context.WithTimeout(ctx, time.Second)
			prev, err := op.ForceRelease(octx, key, token)
			cancel()
			calls++
			if err == nil && prev.Held {
				ended++
			}
		}
	}
	res := r.finish(rowOptions{})
	if ended == 0 {
		t.Errorf("none of %d forced releases ended a holder: the row proved nothing", calls)
	}
	lost := count(r.rec.Ops(), func(o chaos.Op) bool {
		return (o.Kind == chaos.KindRenew || o.Kind == chaos.KindRelease) && o.Outcome == chaos.Lost
	})
	t.Logf("%d forced releases, %d ended a holder; %d renewals or releases refused as lost; %d operations checked",
		calls, ended, lost, res.Checked)
}
