// Package leasequeue claims work items with leases, each item processed
// under a lease of its own (its subpackage partition shares named
// partitions among the live workers of a group). Completion and failure
// are fenced writes, so a worker that lost its claim (paused past its
// lease, cut off from the lease backend) can never complete, fail or
// double-process an item, and an item whose worker died can be claimed
// again as soon as its lease expires, with no fixed rescue delay.
//
// # Items
//
// A Queue claims the items of a Source for one worker, each under the
// lease key Options.Name + "/items/" + id (with '%', '{', '}' and '/' of id
// escaped, see Queue.Key). The item is its own lease: Claim takes one item
// in one request that makes it running, counts the attempt and records the
// claim's holder, secret, token and expiry on the item. The claim is
// renewed in the background, by the lease package's renewer, until it is
// completed, failed or released:
//
//	c, err := q.Claim(ctx, "invoice-42")
//	...
//	err = c.Complete(ctx) // fenced: refused once another worker claimed the item
//
// Run is the worker loop: it claims as many ready items as it has free
// slots (Options.Concurrency), in one request, and runs a
// Handler under the claim's context, which is cancelled the moment the
// lease is lost. A nil result completes the item; an error fails it, and
// after
// Options.MaxAttempts attempts the item goes to the dead-letter state.
// Attempts are counted when they begin, so an item whose workers keep
// dying is buried too. ClaimNext claims ready items the same way, for a
// worker loop of your own.
//
// Complete and Fail return a *lease.LostError when the claim's lease is
// known to be gone, and the source refuses them with a *fence.StaleError
// once a newer claim has begun: the item keeps the new owner's state.
// PostgresSource.CompleteTx and ValkeySource.CompleteClaimWith complete an
// item together with writes of your own, atomically and under the same
// fence, so those writes happen exactly once.
//
// A snapshot is plain data, so a forged one can carry any token. Set as an
// item's fence, a token far above the real ones would refuse every later
// claim of the item (and on PostgreSQL, at 2^63−1, make the next claim's
// token overflow). So PostgresSource and ValkeySource apply the fences'
// rule: completions and failures refuse a token more than
// fence.MaxTokenLead ahead of the source's own clock with a
// *fence.ImplausibleTokenError (fence.ErrImplausibleToken), writing
// nothing, and their claims pass over an item whose fence already holds
// one, so it never holds up the others (see Source).
//
// # Sources
//
// A Source keeps the items of a queue and their claims, and writes each
// outcome fenced by the claim's token. The sources are PostgresSource,
// ValkeySource and MemorySource; the interface is closed. PostgresSource
// keeps the items of any number of queues
// in one table (see MigratePostgres): one statement claims due rows with
// FOR UPDATE SKIP LOCKED, and one completes or fails an item, checking the
// fence (a pair of columns) and ending the claim in the statement that
// writes the row; completions that overlap share one statement.
// ValkeySource keeps the IDs in a list (producers can RPUSH to it, see
// ValkeySource.ReadyKey) and a sorted set of handed-out items, all in the
// queue's hash slot: one Lua script claims, one completes or fails an item
// under its token.
// MemorySource is the in-process reference. The item of a worker that
// died is claimable as soon as its claim expires on the source's clock.
//
// ACL rules apply to the commands inside scripts too. The least a Valkey
// user of ValkeySource and partition.ValkeyRoster needs, with the leases on the
// Valkey lease backend and the default prefixes (SECURITY.md explains each
// grant, and what a cluster needs):
//
//	ACL SETUSER workers reset on >secret ~lease:* &lease:* ~leasequeue:* +client|tracking +evalsha +evalsha_ro +eval +eval_ro +script|load +hmget +hset +persist +pexpire +hget +hsetnx +hdel +hincrby +get +type +incrby +del +rpush +lpop +zadd +zrange +zscore +zrem +sadd +smembers +srem +time +spublish +ssubscribe +sunsubscribe +info
//
// # Retention
//
// Finished items do not stay forever. Each source keeps a done item for
// DoneRetention (default DefaultDoneRetention, 24 hours) and a dead one for
// DeadRetention (default DefaultDeadRetention, 7 days) after it finished,
// on the source's clock, then its Sweep (lease.Sweeper) removes it; the
// options are fields of PostgresOptions, ValkeyOptions and MemoryOptions,
// and lease.KeepForever keeps the items of a state for good. Sweep removes
// an item only in the request that checks it is still done or dead and
// past its retention, so a pending or running item, also one whose claim
// expired and whose worker may still complete it, is never removed.
//
// Run sweeps by itself: about every Options.PruneEvery (default an hour)
// it walks the source's Sweep pages under the lease Queue.PruneKey, taken
// with TryAcquire, so one worker across all replicas prunes at a time, and
// reports each prune with a Pruned event. Queue.Prune does it on demand;
// a lease.Client sweeps a source listed in ClientOptions.Sweepers too.
//
// Enqueue leaves an ID the queue has alone, in any state, so the retention
// is also how long an ID enqueued twice runs once. Once its item is
// removed, the ID is new again: Enqueue adds it as a new item, and its
// first claim gets a token above every token of the removed item, because
// claim tokens are max(the item's token + 1, the source's clock in µs) and
// Sweep removes an item only once its token is below that clock
// (MemorySource, which has no such clock, counts from above the highest
// token it removed). So a claim of the removed item cannot write the new
// one.
//
// # Health
//
// A worker watches the local deadlines of the leases it holds. While a
// renewal is overdue (a local deadline nearer than on-schedule renewals
// allow), and for a TTL after it lost a lease because its renewals did not
// go through, it takes no new work: Claim fails with ErrUnhealthy, Run
// claims nothing (and a partition.Group acquires no partition).
//
// # Observations
//
// An Observer receives events: Claimed, Heartbeat (a renewal went
// through, or is overdue), Completed, Failed, Lost and Pruned, and the
// events of package partition. NewSlogObserver logs them all. The leases'
// own events go to the lease.Client's observer, those of the items'
// claims too (renewed, lost, released; a claim is granted by the source, so there is no
// Acquired event for it).
//
// # What a lease does not do
//
// Leases bound how long a claim lasts; they do not stop a paused process.
// Pass Claim.Snapshot to every write your handler
// makes outside the source (see package fence), or make those writes with
// CompleteTx or CompleteClaimWith.
package leasequeue
