// Package partition shares named partitions (shards, tenants) among the
// live workers of a group, evenly, with one lease per partition, so that
// each partition has one owner at a time and the owner's writes carry the
// partition's fencing token.
//
// # Membership
//
// Each worker holds a membership lease (Options.Name + "/members/" +
// worker, with '%', '{', '}' and '/' of the name escaped) and records its
// name in a Roster, which only records names: a name counts while its
// membership lease is held. There is no coordinator: every RebalanceEvery
// each worker sorts the live members, takes its share
// (len(Partitions)/members, plus one for the first len(Partitions)%members
// workers), gives up partitions above its share and acquires free ones
// below it, in an order of preference of its own (rendezvous hashing).
// MemoryRoster, PostgresRoster (a table of the leasequeue tables, created
// by leasequeue.MigratePostgres) and ValkeyRoster (a set beside the
// leasequeue keys) are the ready-made rosters.
//
// # Handlers
//
// For each partition it owns, the worker runs a Func with the partition's
// Snapshot, whose token fences the handler's writes (see package fence),
// under a context that is cancelled the moment the partition is lost
// (cause wrapping lease.ErrLost) or revoked (cause ErrRevoked). A revoked
// partition is released only after its handler has returned, so its next
// owner never overlaps it; a lost one frees up when its lease expires.
//
// # Health and observations
//
// While a renewal of one of its leases is overdue, and for a TTL after it
// lost one because its renewals did not go through, a worker acquires no
// partition. The events are those of package leasequeue/queueevent:
// Assigned, Revoked (graceful), Lost (not), Rebalanced and Heartbeat;
// leasequeue.NewSlogObserver logs them.
package partition
