package leasequeue

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/lease"
)

// Crash stops q.Run as a crashed process would: no claim is renewed,
// released or written again. Run returns once its handlers have returned.
func (q *Queue) Crash() { q.crash() }

// Overdue reports whether the renewal of any lease the queue tracks is
// overdue.
func (q *Queue) Overdue() bool { return !q.track.Healthy(q.clock.Now()) }

// DueKey, DeadKey and SinceKey return the names of the queue's due and
// dead sets and of its ready-time hash.
func (s *ValkeySource) DueKey() string   { return s.due }
func (s *ValkeySource) DeadKey() string  { return s.dead }
func (s *ValkeySource) SinceKey() string { return s.since }

// Resource returns the name of item id in errors.
func (s *ValkeySource) Resource(id string) (string, error) { return s.resource(id) }

// FenceKey returns the name of item id's fence key.
func (s *ValkeySource) FenceKey(id string) string { return s.ItemKey(id, "fence") }

// Error explainers of the sources, for the classification tests.
var (
	PgError     = pgError
	CommitError = commitError
	ValkeyError = valkeyError
)

// PendingCompletions returns how many Complete calls wait for the next
// batch.
func (s *PostgresSource) PendingCompletions() int {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return len(s.batch.pending)
}

// CompleterIdle reports whether no completion statement is in flight.
func (s *PostgresSource) CompleterIdle() bool {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return !s.batch.lone && !s.batch.busy
}

// DB and Queue return the database and the queue name of the source.
func (s *PostgresSource) DB() PostgresDB { return s.db }
func (s *PostgresSource) Queue() string  { return s.queue }

// WithTokenLead returns a copy of s whose scripts admit tokens up to lead
// microseconds ahead of the server's clock, instead of fence.MaxTokenLead:
// raised far enough, the tests reach the scripts' token arithmetic with
// tokens near 2^64.
func (s *ValkeySource) WithTokenLead(lead int64) *ValkeySource {
	c := *s
	c.scripts = newTokenScripts(lead)
	return &c
}

// DoneKey returns the name of the queue's done set.
func (s *ValkeySource) DoneKey() string { return s.done }

// PruneStatement returns the statement of the source's Sweep pages.
func (s *PostgresSource) PruneStatement() string { return s.prune }

// The source contract, exported for the tests that drive the sources
// directly.
type (
	ClaimRequest = claimReq
	Granted      = grant
	Failure      = failRecord
)

// Claimer is a Source as the tests call it.
type Claimer interface {
	Source
	ClaimNext(ctx context.Context, r ClaimRequest, n int) ([]Granted, error)
	ClaimItem(ctx context.Context, r ClaimRequest, id string) (Granted, error)
	RenewClaim(ctx context.Context, id string, a lease.Acquisition, ttl time.Duration) error
	ReleaseClaim(ctx context.Context, id string, a lease.Acquisition) error
	InspectClaim(ctx context.Context, id string) (lease.Record, error)
	Complete(ctx context.Context, snap lease.Snapshot, id string) error
	Fail(ctx context.Context, snap lease.Snapshot, id string, f Failure) error
}

func (s *MemorySource) ClaimNext(ctx context.Context, r ClaimRequest, n int) ([]Granted, error) {
	return s.claimReady(ctx, r, n)
}
func (s *MemorySource) ClaimItem(ctx context.Context, r ClaimRequest, id string) (Granted, error) {
	return s.claimID(ctx, r, id)
}
func (s *MemorySource) RenewClaim(ctx context.Context, id string, a lease.Acquisition, ttl time.Duration) error {
	return s.renewClaim(ctx, id, a, ttl)
}
func (s *MemorySource) ReleaseClaim(ctx context.Context, id string, a lease.Acquisition) error {
	return s.releaseClaim(ctx, id, a)
}
func (s *MemorySource) InspectClaim(ctx context.Context, id string) (lease.Record, error) {
	return s.inspectClaim(ctx, id)
}
func (s *MemorySource) Complete(ctx context.Context, snap lease.Snapshot, id string) error {
	return s.completeItem(ctx, snap, id)
}
func (s *MemorySource) Fail(ctx context.Context, snap lease.Snapshot, id string, f Failure) error {
	return s.failItem(ctx, snap, id, f)
}
func (s *PostgresSource) ClaimNext(ctx context.Context, r ClaimRequest, n int) ([]Granted, error) {
	return s.claimReady(ctx, r, n)
}
func (s *PostgresSource) ClaimItem(ctx context.Context, r ClaimRequest, id string) (Granted, error) {
	return s.claimID(ctx, r, id)
}
func (s *PostgresSource) RenewClaim(ctx context.Context, id string, a lease.Acquisition, ttl time.Duration) error {
	return s.renewClaim(ctx, id, a, ttl)
}
func (s *PostgresSource) ReleaseClaim(ctx context.Context, id string, a lease.Acquisition) error {
	return s.releaseClaim(ctx, id, a)
}
func (s *PostgresSource) InspectClaim(ctx context.Context, id string) (lease.Record, error) {
	return s.inspectClaim(ctx, id)
}
func (s *PostgresSource) Complete(ctx context.Context, snap lease.Snapshot, id string) error {
	return s.completeItem(ctx, snap, id)
}
func (s *PostgresSource) Fail(ctx context.Context, snap lease.Snapshot, id string, f Failure) error {
	return s.failItem(ctx, snap, id, f)
}
func (s *ValkeySource) ClaimNext(ctx context.Context, r ClaimRequest, n int) ([]Granted, error) {
	return s.claimReady(ctx, r, n)
}
func (s *ValkeySource) ClaimItem(ctx context.Context, r ClaimRequest, id string) (Granted, error) {
	return s.claimID(ctx, r, id)
}
func (s *ValkeySource) RenewClaim(ctx context.Context, id string, a lease.Acquisition, ttl time.Duration) error {
	return s.renewClaim(ctx, id, a, ttl)
}
func (s *ValkeySource) ReleaseClaim(ctx context.Context, id string, a lease.Acquisition) error {
	return s.releaseClaim(ctx, id, a)
}
func (s *ValkeySource) InspectClaim(ctx context.Context, id string) (lease.Record, error) {
	return s.inspectClaim(ctx, id)
}
func (s *ValkeySource) Complete(ctx context.Context, snap lease.Snapshot, id string) error {
	return s.completeItem(ctx, snap, id)
}
func (s *ValkeySource) Fail(ctx context.Context, snap lease.Snapshot, id string, f Failure) error {
	return s.failItem(ctx, snap, id, f)
}

// CompleteWith is completeWith.
func (s *ValkeySource) CompleteWith(ctx context.Context, snap lease.Snapshot, id string, cmds ...fencevalkey.Command) error {
	return s.completeWith(ctx, snap, id, cmds...)
}

// CutSource is src whose renewals, releases and failures fail with err
// while cut is set, as if the source were cut off.
func CutSource(src Source, cut *atomic.Bool, err error) Source { return cutSource{src, cut, err} }

type cutSource struct {
	Source
	cut *atomic.Bool
	err error
}

func (c cutSource) renewClaim(ctx context.Context, id string, a lease.Acquisition, ttl time.Duration) error {
	if c.cut.Load() {
		return c.err
	}
	return c.Source.renewClaim(ctx, id, a, ttl)
}

func (c cutSource) releaseClaim(ctx context.Context, id string, a lease.Acquisition) error {
	if c.cut.Load() {
		return c.err
	}
	return c.Source.releaseClaim(ctx, id, a)
}

func (c cutSource) failItem(ctx context.Context, snap lease.Snapshot, id string, f failRecord) error {
	if c.cut.Load() {
		return c.err
	}
	return c.Source.failItem(ctx, snap, id, f)
}
