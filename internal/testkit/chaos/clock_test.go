package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// jumpClock is a fake lease.Clock for the clients: the system clock plus
// an offset that the test steps, forward or back, as a wall clock that is
// corrected jumps. Readings keep the system clock's monotonic part shifted
// by the offset, so durations between them include the jumps; timers run
// on real time, as they do on a real machine whose clock is stepped.
type jumpClock struct{ offset atomic.Int64 }

func (c *jumpClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func (c *jumpClock) NewTimer(d time.Duration) lease.Timer { return lease.SystemClock().NewTimer(d) }

func (c *jumpClock) jump(d time.Duration) { c.offset.Add(int64(d)) }

// TestClientClockJumps runs the goroutine clients on a clock that jumps:
// forward by up to twice the TTL, and back by at most a quarter of the
// safety margin, at most once per TTL (the library's assumption is that a
// client's clock runs slow by less than the margin over one TTL). The
// local deadline must never exceed the backend's expiry: the checker
// compares every write's belief, "I hold this lease for R more", with
// the backend's expiry bounded from the recorded grants and renewals.
func TestClientClockJumps(t *testing.T) {
	clock := &jumpClock{}
	r := startRun(t, valkeyTarget(testserver.Valkey(t).Addr()), rowOptions{clock: clock})
	margin := r.policy.Options().SafetyMargin
	var lastBack time.Time
	for r.running() {
		r.pause(100*time.Millisecond, 500*time.Millisecond)
		j := time.Duration(r.rng.Int64N(int64(2 * ttl)))
		if r.rng.IntN(3) == 0 && time.Since(lastBack) > ttl {
			j = -time.Duration(r.rng.Int64N(int64(margin / 4)))
			lastBack = time.Now()
		}
		r.h.Fault(fmt.Sprintf("client clock %+v", j), false, func() { clock.jump(j) })
	}
	res := r.finish(rowOptions{})
	if res.Deadlines == 0 {
		t.Error("no local deadline was checked")
	}
}

// TestClockStepBackCaught shows what is not guaranteed, and that the
// checker sees it: a client whose clock steps back by more than the
// safety margin believes it holds its lease after the backend let it go.
func TestClockStepBackCaught(t *testing.T) {
	t.Setenv(chaos.EnvOut, t.TempDir())
	ctx := context.Background()
	clock := &jumpClock{}
	rec := chaos.NewRecorder(nil)
	lane := chaos.NewLanes("p").New()
	target := valkeyTarget(testserver.Valkey(t).Addr())
	b, s, closeFn, err := target.Open(ctx, "chaos-clock")
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	c, err := lease.NewClient(chaos.NewRecordingBackend(b, rec, lane), lease.ClientOptions{Owner: "clock", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	p := rowPolicy(t)
	h, err := c.Acquire(chaos.WithLane(ctx, lane), "k1", p)
	if err != nil {
		t.Fatal(err)
	}
	clock.jump(-2 * p.TTL()) // back by twice the TTL
	store := chaos.NewRecordingStore(s, rec)
	if out, err := store.Write(ctx, lane, chaos.Write{Snap: h.Snapshot(), Acq: lane.Granted(), Resource: chaos.Resource("k1"), Value: "v",
		Remaining: func() time.Duration { return h.Deadline().Sub(clock.Now()) }}); out != chaos.OK {
		t.Fatal(out, err)
	}
	res := chaos.Check(rec.Ops(), chaos.CheckOptions{Name: t.Name(), ModelOptions: chaos.ModelOptions{ClockTokens: true}})
	t.Log(res)
	if res.OK() || !strings.Contains(res.Problems[0], "believed") {
		t.Fatal("a belief past the backend's expiry went unnoticed")
	}
}

// TestStopAfterPauseReportsLoss is the holder-pause row's "its Managed
// reports loss on resume", made deterministic: a client on Valkey whose
// process was paused past its local deadline (its clock jumps; no timer
// has fired) stops its renewer before the renewer runs again. Stop must
// report the loss. Before lease.Managed.Stop checked the deadline, it
// returned nil here, and the paused holder of TestHolderPaused sometimes
// saw no loss at all.
func TestStopAfterPauseReportsLoss(t *testing.T) {
	ctx := context.Background()
	clock := &jumpClock{}
	target := valkeyTarget(testserver.Valkey(t).Addr())
	b, _, closeFn, err := target.Open(ctx, "chaos-stop")
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	c, err := lease.NewClient(b, lease.ClientOptions{Owner: "paused", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Acquire(ctx, "k1", rowPolicy(t))
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.StartManaged(ctx)
	if err != nil {
		t.Fatalf("StartManaged: %v", err)
	}
	clock.jump(2 * ttl)
	err = m.Stop(ctx)
	var lost *lease.LostError
	if !errors.As(err, &lost) || lost.Reason != lease.DeadlinePassed {
		t.Fatalf("Stop after a pause past the deadline = %v, want the loss", err)
	}
	select {
	case <-m.Lost():
	default:
		t.Fatal("Lost not closed")
	}
}
