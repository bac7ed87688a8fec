package leasequeue

// Crash stops q.Run as a crashed process would: no claim is renewed,
// released or written again. Run returns once its handlers have returned.
func (q *Queue) Crash() { q.crash() }

// Crash stops g.Run as a crashed process would: no lease is renewed or
// released again. Run returns once its handlers have returned.
func (g *Group) Crash() { g.crash() }

// Overdue reports whether the renewal of any lease the queue tracks is
// overdue.
func (q *Queue) Overdue() bool { return !q.track.healthy(q.clock.Now()) }

// MemberKey and PartitionKey are the lease keys of a group's members and
// partitions.
var MemberKey, PartitionKey = memberKey, partitionKey

// DueKey, DeadKey and SinceKey return the names of the queue's due and
// dead sets and of its ready-time hash.
func (s *ValkeySource) DueKey() string   { return s.due }
func (s *ValkeySource) DeadKey() string  { return s.dead }
func (s *ValkeySource) SinceKey() string { return s.since }

// Resource returns the name of item id in errors.
func (s *ValkeySource) Resource(id string) (string, error) { return s.resource(id) }

// FenceKey returns the name of item id's fence key.
func (s *ValkeySource) FenceKey(id string) string { return s.ItemKey(id, "fence") }

// Key returns the name of group's member set.
func (r *ValkeyRoster) Key(group string) string { return r.key(group) }

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
