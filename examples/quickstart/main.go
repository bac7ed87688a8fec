// Command quickstart shows why a lease needs a fencing token. It runs on the
// in-memory backend, so it needs no server:
//
//	go run ./examples/quickstart
//
// Worker A acquires a lease and writes with its token. A is then paused
// (think of a long garbage-collection pause or a frozen VM) for longer than
// the lease's TTL. Worker B acquires the expired lease, gets a higher token,
// and writes. When A wakes up it still believes it is the holder and
// writes again: the store rejects the write because A's token is stale.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
)

func main() {
	if err := run(context.Background(), os.Stdout, time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run plays the timeline with leases of the given TTL.
func run(ctx context.Context, w io.Writer, ttl time.Duration) error {
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(w, "[%4dms] ", time.Since(start).Milliseconds())
		fmt.Fprintf(w, format+"\n", args...)
	}

	backend := leasememory.New(leasememory.Options{})
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: ttl})
	if err != nil {
		return err
	}
	workerA, err := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-a"})
	if err != nil {
		return err
	}
	workerB, err := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-b"})
	if err != nil {
		return err
	}
	store := &fencedStore{}

	// A acquires the lease and writes under its token.
	a, err := workerA.Acquire(ctx, "invoices/2026-11", policy)
	if err != nil {
		return err
	}
	say("worker-a acquired the lease with token %d (TTL %v)", a.Token(), ttl)
	if err := store.Write(a.Token(), "total=100 (by worker-a)"); err != nil {
		return err
	}
	say("worker-a wrote with token %d: accepted", a.Token())

	// A is paused: no renewals, no progress, for longer than the TTL.
	pause := ttl + ttl/2
	say("worker-a is paused for %v, longer than its TTL", pause)
	time.Sleep(pause)

	// Meanwhile the backend expired A's lease; B takes over.
	b, err := workerB.Acquire(ctx, "invoices/2026-11", policy)
	if err != nil {
		return err
	}
	say("worker-b acquired the expired lease with token %d", b.Token())
	if err := store.Write(b.Token(), "total=250 (by worker-b)"); err != nil {
		return err
	}
	say("worker-b wrote with token %d: accepted", b.Token())

	// A wakes up and, not knowing it was paused, writes again.
	say("worker-a wakes up; its local deadline passed %v ago, but it writes anyway",
		time.Since(a.Deadline()).Round(100*time.Millisecond))
	err = store.Write(a.Token(), "total=90 (by worker-a)")
	var stale *staleError
	if !errors.As(err, &stale) {
		return fmt.Errorf("the stale write was not rejected: %v", err)
	}
	say("worker-a's write was rejected: %v", err)

	if err := a.Release(ctx); errors.Is(err, lease.ErrLost) {
		say("worker-a's release failed too: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		return err
	}
	say("worker-b released the lease")
	say("final value: %s", store.Value())
	return nil
}

// fencedStore is the smallest possible fenced resource: it remembers the
// highest token it accepted and rejects writes with a lower one. Packages
// fence and cache do the same, atomically, in PostgreSQL and Valkey.
type fencedStore struct {
	mu    sync.Mutex
	last  lease.Token
	value string
}

type staleError struct{ token, current lease.Token }

func (e *staleError) Error() string {
	return fmt.Sprintf("stale token %d: the store already accepted token %d", e.token, e.current)
}

// Write stores value if token is not lower than any token accepted before.
func (s *fencedStore) Write(token lease.Token, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.last {
		return &staleError{token, s.last}
	}
	s.last, s.value = token, value
	return nil
}

func (s *fencedStore) Value() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value
}
