package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

func Example() {
	ctx := context.Background()
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	backend := leasememory.New(leasememory.Options{Clock: clock})

	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	a, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-a", Clock: clock})
	b, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-b", Clock: clock})

	h, err := a.Acquire(ctx, "billing/nightly", policy)
	if err != nil {
		panic(err)
	}
	fmt.Println("worker-a holds token", h.Token())

	_, err = b.TryAcquire(ctx, "billing/nightly", policy)
	fmt.Println("worker-b:", err)
	fmt.Println("is ErrNotAcquired:", errors.Is(err, lease.ErrNotAcquired))

	if err := h.Release(ctx); err != nil {
		panic(err)
	}
	h2, err := b.TryAcquire(ctx, "billing/nightly", policy)
	if err != nil {
		panic(err)
	}
	fmt.Println("worker-b holds token", h2.Token())
	// Output:
	// worker-a holds token 1
	// worker-b: lease: acquire "billing/nightly": held by "worker-a" (token 1) for another 30s
	// is ErrNotAcquired: true
	// worker-b holds token 2
}

func ExampleHandle_StartManaged() {
	ctx := context.Background()
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	backend := leasememory.New(leasememory.Options{Clock: clock})
	client, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-a", Clock: clock})
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})

	h, err := client.Acquire(ctx, "reports/daily", policy)
	if err != nil {
		panic(err)
	}
	defer h.Release(context.WithoutCancel(ctx)) // runs last: free the key
	m, err := h.StartManaged(ctx)
	if err != nil {
		panic(err)
	}
	defer m.Stop(context.WithoutCancel(ctx)) // runs first: stop renewing

	// The protected work runs under m.Context(): it is cancelled the moment
	// the lease is lost.
	work := m.Context()
	select {
	case <-work.Done():
		fmt.Println("lost:", context.Cause(work))
	default:
		fmt.Println("working under token", h.Token())
	}
	// Output:
	// working under token 1
}

func ExampleNewPolicy() {
	_, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, RenewEvery: 25 * time.Second})
	fmt.Println(err)
	// Output:
	// lease: invalid policy: RenewEvery (25s) + Retry (100ms) + 2×OperationTimeout (3s) = 31.1s must not exceed TTL−SafetyMargin (25s), so that a renewal that times out can still be retried before the local deadline
}

// A semaphore whose permits fence a resource each: the staging area of
// their slot. A holder paused past its TTL loses its slot to another
// worker, and the fence refuses its late write.
func ExampleClient_AcquirePermit_perSlot() {
	ctx := context.Background()
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	backend := leasememory.New(leasememory.Options{Clock: clock})
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	a, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-a", Clock: clock})
	b, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-b", Clock: clock})
	var staging fence.Memory // stands for any fenced store: fencepostgres, fencevalkey, …

	// docs:begin per-slot
	// At most 2 exports at once; each writes the staging area of its slot,
	// fenced by its permit key (Snapshot).
	export := func(client *lease.Client) (*lease.Handle, string) {
		h, err := client.AcquirePermit(ctx, "exports", 2, policy)
		if err != nil {
			panic(err)
		}
		_, slot, _ := h.Permit()
		area := fmt.Sprint("staging/", slot)
		err = staging.Do(h.Snapshot(), []string{area}, func() error {
			return nil // write the export to its staging area
		})
		fmt.Printf("%s holds permit %d (token %d) and writes %s: %v\n", h.Owner(), slot, h.Token(), area, err)
		return h, area
	}
	// docs:end per-slot

	paused, area := export(a)
	clock.Advance(31 * time.Second) // worker-a is paused past its TTL
	export(b)                       // slot 0 is free again: worker-b takes it

	err := staging.Do(paused.Snapshot(), []string{area}, func() error { return nil })
	fmt.Println("worker-a wakes up:", err)
	// Output:
	// worker-a holds permit 0 (token 1) and writes staging/0: <nil>
	// worker-b holds permit 0 (token 2) and writes staging/0: <nil>
	// worker-a wakes up: fence: resource "staging/0": token 1 of lease "exports/permit/0" is stale: the fence has accepted token 2
}

// A semaphore whose permit holders all work on the same resources (jobs
// that any of them may take, and that may be handed to another holder):
// a resource fenced by the semaphore's key belongs to the newest permit
// that wrote it.
func ExampleClient_AcquirePermit_perSemaphore() {
	ctx := context.Background()
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	backend := leasememory.New(leasememory.Options{Clock: clock})
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	a, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-a", Clock: clock})
	b, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-b", Clock: clock})
	var jobs fence.Memory // stands for any fenced store: fencepostgres, fencevalkey, …

	// docs:begin per-semaphore
	// At most 3 workers call the provider at once. Any of them may run job
	// 42, and a job may be handed to another worker: its row is fenced by
	// the semaphore's key (SnapshotFor), with permit tokens that rise
	// across all slots.
	run := func(h *lease.Handle, job string) error {
		snap, err := h.SnapshotFor("payments")
		if err != nil {
			return err
		}
		return jobs.Do(snap, []string{job}, func() error {
			return nil // write the job's result
		})
	}
	// docs:end per-semaphore

	first, _ := a.AcquirePermit(ctx, "payments", 3, policy)
	second, _ := b.AcquirePermit(ctx, "payments", 3, policy)
	fmt.Println("worker-a runs job/42:", run(first, "job/42"))
	// worker-a stalls; job 42 is handed to worker-b, on another slot.
	fmt.Println("worker-b runs job/42:", run(second, "job/42"))
	fmt.Println("worker-a resumes:", run(first, "job/42"))
	// Output:
	// worker-a runs job/42: <nil>
	// worker-b runs job/42: <nil>
	// worker-a resumes: fence: resource "job/42": token 1 of lease "payments" is stale: the fence has accepted token 2
}

// A set of keys taken together: a transfer between two accounts holds
// both, and fences each account's write by its own key with the set's one
// token.
func ExampleClient_AcquireSet() {
	ctx := context.Background()
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	backend := leasememory.New(leasememory.Options{Clock: clock})
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second})
	teller, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "teller-a", Clock: clock})
	other, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "teller-b", Clock: clock})
	var ledger fence.Memory // stands for any fenced store: fencepostgres, fencevalkey, …
	balances := map[string]int{"account/17": 500, "account/42": 0}

	// docs:begin set
	// Move 100 from account 17 to account 42: hold both, or neither.
	h, err := teller.AcquireSet(ctx, []string{"account/42", "account/17"}, policy)
	if err != nil {
		panic(err)
	}
	defer h.Release(context.WithoutCancel(ctx))
	for account, amount := range map[string]int{"account/17": -100, "account/42": +100} {
		snap, err := h.SnapshotFor(account) // the account's key, the set's token
		if err != nil {
			panic(err)
		}
		err = ledger.Do(snap, []string{account}, func() error {
			balances[account] += amount
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	// docs:end set

	fmt.Println(h.Keys(), "token", h.Token(), "balances", balances["account/17"], balances["account/42"])
	_, err = other.TryAcquireSet(ctx, []string{"account/42", "account/99"}, policy)
	fmt.Println(err)
	// Output:
	// [account/17 account/42] token 1 balances 400 100
	// lease: acquire set "account/42,account/99": key "account/42": held by "teller-a" (token 1) for another 30s
}
