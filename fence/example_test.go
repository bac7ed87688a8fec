package fence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	sq "github.com/Masterminds/squirrel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	valkey "github.com/valkey-io/valkey-go"

	leasememory "github.com/golib/lease/backends/memory"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencecolumn"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasetest"
)

// A paused holder's late write is refused by the fence, on the memory
// backend and an in-memory fence, with no server.
func Example() {
	ctx := context.Background()
	clock := leasetest.NewFakeClock(time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC))
	backend := leasememory.New(leasememory.Options{Clock: clock})
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	workerA, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-a", Clock: clock})
	workerB, _ := lease.NewClient(backend, lease.ClientOptions{Owner: "worker-b", Clock: clock})

	// docs:begin memory
	var (
		f     fence.Memory // the fence of the resources below
		total string       // the resource "invoice/42"
	)
	write := func(snap lease.Snapshot, value string) error {
		return f.Do(snap, []string{"invoice/42"}, func() error { total = value; return nil })
	}

	a, _ := workerA.Acquire(ctx, "billing/nightly", policy)
	fmt.Println("A writes:", write(a.Snapshot(), "100"))

	clock.Advance(15 * time.Second) // A is paused past its TTL
	b, _ := workerB.Acquire(ctx, "billing/nightly", policy)
	fmt.Println("B writes:", write(b.Snapshot(), "250"))

	err := write(a.Snapshot(), "90") // A wakes up and writes
	fmt.Println("A writes:", err)
	fmt.Println("stale:", errors.Is(err, fence.ErrStale), "total:", total)
	// docs:end memory

	// Output:
	// A writes: <nil>
	// B writes: <nil>
	// A writes: fence: resource "invoice/42": token 1 of lease "billing/nightly" is stale: the fence has accepted token 2
	// stale: true total: 250
}

// closeInvoice closes an invoice in a transaction fenced by the holder of
// the lease "billing/nightly".
func closeInvoice(ctx context.Context, pool *pgxpool.Pool, h *lease.Handle, id int) error {
	// docs:begin tx
	resource := fmt.Sprintf("invoice/%d", id)
	for attempt := 1; ; attempt++ {
		err := fencepostgres.Tx(ctx, pool, h.Snapshot(), []string{resource}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE invoices SET status = 'closed' WHERE id = $1`, id)
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO invoice_events (invoice, event) VALUES ($1, 'closed')`, id)
			return err
		})
		switch {
		case fence.IsRetryable(err) && attempt < 3:
			continue // serialization failure or deadlock: nothing was written, run it again
		case errors.Is(err, fence.ErrStale), errors.Is(err, fence.ErrForeignLease):
			return fmt.Errorf("not closing invoice %d: %w", id, err) // a newer holder took over
		}
		return err
	}
	// docs:end tx
}

// Fence a transaction in PostgreSQL. The fences table is created once with
// fencepostgres.Migrate; the lease may live in any backend.
func Example_tx() {
	var (
		ctx  context.Context
		pool *pgxpool.Pool
		h    *lease.Handle
	)
	// docs:begin migrate
	// At start-up, on every replica (concurrent calls are safe):
	if err := fencepostgres.Migrate(ctx, pool, fencepostgres.TableOptions{}); err != nil {
		return
	}
	// docs:end migrate
	_ = closeInvoice(ctx, pool, h, 42)
}

// Run the fenced transaction at SERIALIZABLE.
func Example_serializable() {
	var (
		ctx  context.Context
		pool *pgxpool.Pool
		snap lease.Snapshot
	)
	db := fencepostgres.WithTxOptions(pool, pgx.TxOptions{IsoLevel: pgx.Serializable})
	err := fencepostgres.Tx(ctx, db, snap, []string{"ledger/eu"}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO ledger (region, amount) SELECT 'eu', sum(amount) FROM payments`)
		return err
	})
	_ = err
}

// invoiceColumns are the fence columns of the invoices table.
var invoiceColumns = fencecolumn.Column{Token: "fence_token", Key: "fence_key"}

// payInvoice marks an invoice paid, fenced by the invoice row's own
// columns.
func payInvoice(ctx context.Context, db fencecolumn.Querier, snap lease.Snapshot, id int) error {
	// docs:begin column
	tag, err := fencecolumn.Update(ctx, db, snap, fencecolumn.UpdateRows{
		Table: "invoices",
		Set:   map[string]any{"status": "paid"},
		Where: sq.Eq{"id": id}, // any sq.Sqlizer; fenced as one unit: (id = $1) AND (fence…)
	}, fencecolumn.Column{Token: "fence_token", Key: "fence_key"})
	switch {
	case errors.Is(err, fence.ErrStale):
		return err // the row was written under a newer token: nothing written
	case err != nil:
		return err
	case tag.RowsAffected() == 0:
		return fmt.Errorf("no invoice %d", id) // not a fence problem: no row matched
	}
	return nil
	// docs:end column
}

// recordTotal inserts or overwrites an invoice's total, fenced.
func recordTotal(ctx context.Context, db fencecolumn.Querier, snap lease.Snapshot, id, total int) error {
	// docs:begin upsert
	// INSERT INTO invoices (id, status, total, fence_token, fence_key) SELECT …
	// ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, total = …
	// WHERE the existing row's fence admits the new token and key.
	_, err := fencecolumn.Upsert(ctx, db, snap, fencecolumn.UpsertRow{
		Table:    "invoices",
		Values:   map[string]any{"id": id, "status": "open", "total": total},
		Conflict: []string{"id"},
	}, invoiceColumns)
	// docs:end upsert
	return err
}

// Fence a row with columns of its own, with predicates and values built
// with squirrel.
func Example_column() {
	var (
		ctx  context.Context
		pool *pgxpool.Pool
		h    *lease.Handle
	)
	_ = payInvoice(ctx, pool, h.Snapshot(), 42)
	_ = recordTotal(ctx, pool, h.Snapshot(), 42, 250)
}

// finishJob records a job's outcome in Valkey, fenced by the lease on the
// job.
func finishJob(ctx context.Context, client valkey.Client, h *lease.Handle, job string) error {
	// docs:begin valkey
	fences, err := fencevalkey.New(client, fencevalkey.Options{})
	if err != nil {
		return err
	}
	// The resource is the hash tag: every key names "{jobs/7}", so the keys
	// and the fence key fence:{jobs/7} share a hash slot.
	tag := "{" + job + "}"
	replies, err := fences.Do(ctx, h.Snapshot(), job,
		fencevalkey.HSet("job:"+tag, "state", "done", "by", h.Owner()),
		fencevalkey.Expire("job:"+tag, 24*time.Hour),
		fencevalkey.IncrBy("jobs-done:"+tag, 1),
		fencevalkey.XAdd("events:"+tag, fencevalkey.XAddOptions{MaxLen: 1000, Approx: true}, "event", "done"),
	)
	if errors.Is(err, fence.ErrStale) {
		return err // a newer holder of the lease has written: nothing written
	} else if err != nil {
		return err
	}
	id, _ := replies[3].ToString() // the XADD entry's ID
	_ = id
	// docs:end valkey
	return nil
}

// Apply several Valkey commands under the fence, in one round trip.
func Example_valkey() {
	var (
		ctx    context.Context
		client valkey.Client
		h      *lease.Handle
	)
	_ = finishJob(ctx, client, h, "jobs/7")
}

// takeOver acquires the lease and claims the fences before doing anything
// else, so that a paused previous holder can no longer write.
func takeOver(ctx context.Context, leases *lease.Client, pool *pgxpool.Pool, fences *fencevalkey.Fence, policy lease.Policy) (*lease.Handle, error) {
	// docs:begin claim
	h, err := leases.Acquire(ctx, "billing/nightly", policy)
	if err != nil {
		return nil, err
	}
	// From here on, writes with the previous holder's token are refused,
	// even before this holder's first real write.
	if err := fencepostgres.Claim(ctx, pool, h.Snapshot(), "invoice/42", "invoice/43"); err != nil {
		return nil, err
	}
	if err := fences.Claim(ctx, h.Snapshot(), "jobs/7"); err != nil {
		return nil, err
	}
	// docs:end claim
	return h, nil
}

// Retire the fences that have not advanced for a day: the lease client
// sweeps them in the background, once across replicas, with its backend.
func Example_sweep() {
	var (
		pool    *pgxpool.Pool
		client  valkey.Client
		backend lease.Backend
	)
	// docs:begin sweep
	table, err := fencepostgres.NewTable(fencepostgres.TableOptions{Retention: 24 * time.Hour})
	if err != nil {
		return
	}
	fences, err := fencevalkey.New(client, fencevalkey.Options{Retention: 24 * time.Hour})
	if err != nil {
		return
	}
	leases, err := lease.NewClient(backend, lease.ClientOptions{
		Owner:    "billing-worker",
		Sweepers: []lease.Sweeper{table.Sweeper(pool), fences},
	})
	if err != nil {
		return
	}
	// docs:end sweep
	_ = leases
}

// Claim a resource right after acquiring the lease.
func Example_claim() {
	var (
		ctx    context.Context
		leases *lease.Client
		pool   *pgxpool.Pool
		fences *fencevalkey.Fence
		policy lease.Policy
	)
	_, _ = takeOver(ctx, leases, pool, fences, policy)
}

// docs:begin custom
// objectStore is a store outside PostgreSQL and Valkey with one atomic
// primitive, a conditional put: write only if the object's version is
// still the one read (an ETag, a generation number, a revision).
type objectStore interface {
	Get(ctx context.Context, name string) (obj object, version string, err error)
	PutIf(ctx context.Context, name string, obj object, version string) (ok bool, err error)
}

// object keeps its fence inside itself, so that one conditional put
// writes both.
type object struct {
	Fence fence.Mark
	Data  []byte
}

// fencedPut writes data to the object name under snap's fence: read, apply
// the rule, write both back only if nothing changed in between.
func fencedPut(ctx context.Context, s objectStore, snap lease.Snapshot, name string, data []byte) error {
	for {
		obj, version, err := s.Get(ctx, name)
		if err != nil {
			return err
		}
		next, err := obj.Fence.Admit(name, snap) // *StaleError or *ForeignLeaseError
		if err != nil {
			return err
		}
		ok, err := s.PutIf(ctx, name, object{Fence: next, Data: data}, version)
		if err != nil || ok {
			return err
		}
		// Someone wrote in between: read again and re-check the fence.
	}
}

// docs:end custom

// Fence a resource in a store of your own with Mark.Admit and the store's
// conditional write.
func ExampleMark_Admit() {
	ctx := context.Background()
	store := &memObjects{objects: map[string]versioned{}}
	fmt.Println(fencedPut(ctx, store, lease.Snapshot{Key: "exports", Token: 7}, "report.csv", []byte("v7")))
	fmt.Println(fencedPut(ctx, store, lease.Snapshot{Key: "exports", Token: 6}, "report.csv", []byte("v6")))
	fmt.Println(fencedPut(ctx, store, lease.Snapshot{Key: "imports", Token: 99}, "report.csv", []byte("v99")))
	obj, _, _ := store.Get(ctx, "report.csv")
	fmt.Printf("%s %+v\n", obj.Data, obj.Fence)
	// Output:
	// <nil>
	// fence: resource "report.csv": token 6 of lease "exports" is stale: the fence has accepted token 7
	// fence: resource "report.csv" is fenced by lease "exports" (token 7), not by lease "imports" (token 99)
	// v7 {Key:exports Token:7}
}

// memObjects is an objectStore in memory, for the example.
type memObjects struct {
	mu      sync.Mutex
	objects map[string]versioned
}

type versioned struct {
	obj     object
	version int
}

func (m *memObjects) Get(_ context.Context, name string) (object, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.objects[name]
	return v.obj, fmt.Sprint(v.version), nil
}

func (m *memObjects) PutIf(_ context.Context, name string, obj object, version string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.objects[name]
	if fmt.Sprint(v.version) != version {
		return false, nil
	}
	m.objects[name] = versioned{obj: obj, version: v.version + 1}
	return true, nil
}
