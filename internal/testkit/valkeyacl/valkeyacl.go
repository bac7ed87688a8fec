// Package valkeyacl holds the command-minimal Valkey ACL rules that the
// documentation gives for each package of this module that talks to
// Valkey, and test helpers that run a package as a user with exactly
// those rules and check that what the rules must forbid is refused.
//
// The rules are written for the default prefixes. Each grants the key
// and channel patterns of its package and the commands the package sends
// itself or inside its scripts (ACL rules apply inside scripts too), and
// nothing else: no KEYS, SCAN, FLUSHALL, FLUSHDB, SWAPDB, SCRIPT FLUSH,
// CONFIG, DEBUG, or any key or channel outside the prefixes. The
// commands valkey-go sends on its own need no grant: HELLO with AUTH is
// open to every user, and it ignores a refused CLIENT SETINFO, and a
// refused keep-alive PING (the refusal proves the connection alive).
// Each rule grants CLIENT TRACKING, which a valkey-go client with
// client-side caching on (its default) sends on connecting; it concerns
// the user's own connection only.
package valkeyacl

// Cluster is what each rule needs on a Valkey Cluster besides: valkey-go
// reads the cluster's topology with CLUSTER SHARDS. Create the user on
// every node; nodes do not share ACL users.
const Cluster = "+cluster|shards"

// Lease is the rule of a user of the Valkey lease backend
// (backends/valkey): the lease scripts (HMGET, HSET, TIME, SPUBLISH, and
// PERSIST and PEXPIRE for the retention of ended leases' records),
// release watches (SSUBSCRIBE), and Store.Check (INFO). Store.List needs
// Scan on top, and Store.Sweep Scan and Sweep.
const Lease = "reset on >secret ~lease:* &lease:* " +
	"+client|tracking +evalsha +evalsha_ro +eval +eval_ro +script|load " +
	"+hmget +hset +persist +pexpire +time +spublish +ssubscribe +sunsubscribe +info"

// Scan is what a user of the Valkey lease backend needs besides Lease to
// walk the records, with Store.List and Store.Sweep: SCAN on each primary,
// and ROLE to tell primaries from replicas. SCAN returns the names of
// every key on the server, other tenants' too, whatever the user's key
// patterns: give it to an operator's user, or to the services' only where
// they are alone on the server.
const Scan = "+scan +role"

// Sweep is what Store.Sweep needs besides Lease and Scan: DEL, with which
// its script removes the record of a lease that ended more than a
// retention ago.
const Sweep = "+del"

// Fence is the rule of a user of fencevalkey.Fence, for fenced writes to
// keys under data:* (replace it with the patterns of your data): the
// fence script's own commands (HMGET, HSET, GET, TYPE, TIME for the
// token's plausibility, XINFO STREAM before an XADD) and every command
// of the allow-list. A user that sends only some of those commands needs
// only those.
const Fence = "reset on >secret ~fence:* ~data:* " +
	"+client|tracking +evalsha +eval +script|load +hmget +hset +get +type +time +xinfo|stream " +
	"+set +del +incrby +expire +pexpire +xadd"

// FenceSweep is what a user of fencevalkey.Fence needs on top of Fence to
// sweep (fencevalkey.Fence.Sweep, which a lease.Client runs for the fences
// given in its Sweepers): SCAN and ROLE to walk the fence keys of every
// primary. The retirement script needs only Fence's commands (HMGET,
// HSET, DEL, TIME).
const FenceSweep = "+scan +role"

// Cache is the rule of a user of package cache, on the default prefixes
// of the cache and of its lease Store: the lease rules, reads (GET,
// MGET) and the publication and invalidation scripts (HGET, SET,
// UNLINK, with which a publication also deletes a redundant
// invalidation mark).
const Cache = "reset on >secret ~lease:* &lease:* ~cache:* &cache:* " +
	"+client|tracking +evalsha +evalsha_ro +eval +eval_ro +script|load " +
	"+hmget +hget +hset +persist +pexpire +get +mget +set +unlink +time " +
	"+spublish +ssubscribe +sunsubscribe +info"

// CacheSweep is what a user of package cache needs on top of Cache to
// sweep the invalidation marks (cache.Sweeper, which a lease.Client runs
// when it is given in its Sweepers): SCAN and ROLE to walk the marks of
// every primary. The sweep script needs only Cache's commands (GET,
// HMGET, TIME, UNLINK).
const CacheSweep = "+scan +role"

// Queue is the rule of a user of leasequeue's Valkey source and roster
// whose leases live on the Valkey lease backend: the lease rules, the
// queue's commands and scripts (HSETNX, RPUSH, HGET, HDEL, LPOP, ZADD,
// ZRANGE, ZSCORE, ZREM, and DEL for Sweep), the roster's (SADD, SMEMBERS,
// SREM), and the fence script with the commands items are written with
// (HSET, INCRBY).
const Queue = "reset on >secret ~lease:* &lease:* ~leasequeue:* " +
	"+client|tracking +evalsha +evalsha_ro +eval +eval_ro +script|load " +
	"+hmget +hset +persist +pexpire +hget +hsetnx +hdel +hincrby +get +type +incrby +del +rpush +lpop " +
	"+zadd +zrange +zscore +zrem +sadd +smembers +srem +time " +
	"+spublish +ssubscribe +sunsubscribe +info"

// Quickstart is the rule of the program of docs/valkey-quickstart.md
// (examples/valkey): the Lease rule, and the Fence rule for its one
// fenced SET on report:* keys. Rules add up: a user of several packages
// gets the union of their rules.
const Quickstart = "reset on >secret ~lease:* &lease:* ~fence:* ~report:* " +
	"+client|tracking +evalsha +evalsha_ro +eval +eval_ro +script|load " +
	"+hmget +hset +persist +pexpire +time +spublish +ssubscribe +sunsubscribe +info +set"
