// Command handoff shows a leader handing its lease over to a successor,
// and an observer watching the leadership change. It runs on the
// in-memory backend, so it needs no server:
//
//	go run ./examples/handoff
//
// Replica A leads and writes through a fence. It shuts down: it stops its
// work, stops renewing, and hands the lease off to replica B, which was
// waiting in Acquire and takes over at once, with a higher token. A's late
// write is refused by the fence. Replica C then starts with
// ClientOptions.Preferred: its waiting Acquire marks it as the key's
// preferred candidate, and B, at its next safe point between two units of
// work, sees the mark and hands the lease over to C. An observer prints
// every state it sees.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// key is the lease the replicas take turns on.
const key = "reports/leader"

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "handoff:", err)
		os.Exit(1)
	}
}

// run plays the story, writing it to w.
func run(ctx context.Context, w io.Writer) error {
	p := &printer{w: w, start: time.Now()}
	backend := leasememory.New(leasememory.Options{})
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	if err != nil {
		return err
	}
	// The resource the leaders write, fenced by their tokens.
	var (
		reports fence.Memory
		report  string
	)
	write := func(h *lease.Handle, what string) error {
		return reports.Do(h.Snapshot(), []string{"reports"}, func() error { report = what; return nil })
	}

	a, err := lease.NewClient(backend, lease.ClientOptions{Owner: "replica-a"})
	if err != nil {
		return err
	}
	b, err := lease.NewClient(backend, lease.ClientOptions{Owner: "replica-b"})
	if err != nil {
		return err
	}

	// Replica A leads, renews in the background and writes.
	leaderA, err := a.Acquire(ctx, key, policy)
	if err != nil {
		return err
	}
	renewerA, err := leaderA.StartManaged(ctx)
	if err != nil {
		return err
	}
	p.say("replica-a leads with token %d", leaderA.Token())
	if err := write(leaderA, "by replica-a"); err != nil {
		return err
	}
	p.say("replica-a wrote with token %d", leaderA.Token())

	// An observer prints each state of the key from now until observing
	// ends: first replica-a leading, then every change.
	dashboard, err := lease.NewClient(backend, lease.ClientOptions{Owner: "dashboard"})
	if err != nil {
		return err
	}
	octx, stopObserving := context.WithCancel(ctx)
	var observing sync.WaitGroup
	observing.Go(func() { observe(octx, dashboard, p.say) })
	defer func() { stopObserving(); observing.Wait() }()

	// Replica B waits in Acquire: it is woken when the key is released or
	// handed off to it.
	elected := campaign(ctx, b, policy)
	time.Sleep(50 * time.Millisecond) // let it find the key held and wait

	// docs:begin handoff
	// Shut down: the work has stopped (nothing runs under the lease any
	// more), so stop renewing, then hand the lease to replica-b instead
	// of releasing it. replica-b's waiting Acquire is woken at once.
	if err := renewerA.Stop(ctx); err != nil {
		return err
	}
	offer := lease.Offer{Candidates: []string{"replica-b"}, Window: 2 * time.Second}
	if err := leaderA.HandOff(ctx, offer); err != nil {
		return err
	}
	// docs:end handoff
	handedOff := time.Now()
	p.say("replica-a handed the lease off to replica-b")
	e := <-elected
	if e.err != nil {
		return e.err
	}
	leaderB := e.h
	p.say("replica-b leads with token %d, %v after the hand-off", leaderB.Token(), e.at.Sub(handedOff).Round(time.Microsecond))
	renewerB, err := leaderB.StartManaged(ctx)
	if err != nil {
		return err
	}
	if err := write(leaderB, "by replica-b"); err != nil {
		return err
	}
	p.say("replica-b wrote with token %d", leaderB.Token())

	// docs:begin stale
	// A write that replica-a had in flight arrives late: the fence has
	// seen replica-b's higher token and refuses it.
	err = write(leaderA, "late, by replica-a")
	if !errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("replica-a's late write was not refused: %v", err)
	}
	// docs:end stale
	p.say("replica-a's late write was refused: %v", err)

	// docs:begin preferred
	// Replica C asks to be preferred: each attempt of its Acquire that
	// finds the key held records it as the key's preferred candidate.
	c, err := lease.NewClient(backend, lease.ClientOptions{Owner: "replica-c", Preferred: true})
	if err != nil {
		return err
	}
	// docs:end preferred
	elected = campaign(ctx, c, policy)
	p.say("replica-c waits for the lease, as the preferred candidate")

	// replica-b works in units; between two of them, at a safe point,
	// it looks for a preferred candidate.
	for unit := 1; ; unit++ {
		if err := write(leaderB, fmt.Sprintf("unit %d by replica-b", unit)); err != nil {
			return err
		}
		if unit == 500 {
			return errors.New("replica-b never saw replica-c preferred")
		}
		// docs:begin safepoint
		// A safe point: no unit of work is half done. If another replica
		// asked to be preferred, stop renewing and hand the lease to it.
		rec, err := b.Inspect(ctx, key)
		if err != nil {
			return err
		}
		if rec.Preferred != "" && rec.Preferred != b.Owner() {
			if err := renewerB.Stop(ctx); err != nil {
				return err
			}
			offer := lease.Offer{Candidates: []string{rec.Preferred}}
			if err := leaderB.HandOff(ctx, offer); err != nil {
				return err
			}
			break
		}
		// docs:end safepoint
		time.Sleep(10 * time.Millisecond)
	}
	p.say("replica-b saw replica-c preferred and handed the lease off to it")
	e = <-elected
	if e.err != nil {
		return e.err
	}
	leaderC := e.h
	p.say("replica-c leads with token %d", leaderC.Token())

	// Let the observer see the last change, then end.
	if err := p.waitFor("observer: acquired: replica-c leads", 2*time.Second); err != nil {
		return err
	}
	if err := leaderC.Release(ctx); err != nil {
		return err
	}
	p.say("replica-c released the lease; the last report: %s", report)
	return nil
}

// observe prints every state of key that client observes, until ctx ends.
func observe(ctx context.Context, client *lease.Client, say func(string, ...any)) {
	// docs:begin observe
	for o, err := range client.Observe(ctx, key, lease.ObserveOptions{}) {
		if err != nil {
			say("observer: %v", err) // a read failed; Observe reads again
			continue
		}
		say("observer: %s", describe(o))
	}
	// docs:end observe
}

// docs:begin describe

// describe says who leads in o, and how that came about.
func describe(o lease.Observation) string {
	var s string
	switch {
	case o.Held:
		s = fmt.Sprintf("%s: %s leads with token %d", o.Change, o.Owner, o.Token)
	case len(o.Candidates) > 0:
		s = fmt.Sprintf("%s: no leader, offered to %s with token %d",
			o.Change, strings.Join(o.Candidates, ", "), o.Token)
	default:
		s = fmt.Sprintf("%s: no leader", o.Change)
	}
	if o.Preferred != "" {
		s += ", " + o.Preferred + " preferred"
	}
	return s
}

// docs:end describe

// An election is the outcome of a campaign: a lease or an error, and
// when Acquire returned.
type election struct {
	h   *lease.Handle
	err error
	at  time.Time
}

// campaign waits in client.Acquire for key in the background, and sends
// its outcome on the channel it returns.
func campaign(ctx context.Context, client *lease.Client, p lease.Policy) <-chan election {
	ch := make(chan election, 1)
	go func() {
		h, err := client.Acquire(ctx, key, p)
		ch <- election{h, err, time.Now()}
	}()
	return ch
}

// printer writes timestamped lines and remembers them.
type printer struct {
	w     io.Writer
	start time.Time

	mu    sync.Mutex
	lines []string
}

func (p *printer) say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line := fmt.Sprintf(format, args...)
	p.lines = append(p.lines, line)
	fmt.Fprintf(p.w, "[%4dms] %s\n", time.Since(p.start).Milliseconds(), line)
}

// waitFor waits up to d for a line that begins with prefix.
func (p *printer) waitFor(prefix string, d time.Duration) error {
	for end := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
		p.mu.Lock()
		for _, l := range p.lines {
			if strings.HasPrefix(l, prefix) {
				p.mu.Unlock()
				return nil
			}
		}
		p.mu.Unlock()
		if time.Now().After(end) {
			return fmt.Errorf("no %q within %v", prefix, d)
		}
	}
}
