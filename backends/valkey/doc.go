// Package valkey is a lease.Backend on Valkey (and Redis 7 or newer), built
// on the application's own valkey-go client: standalone, sentinel or
// cluster. Import it as leasevalkey, so that valkey keeps naming valkey-go:
//
//	import (
//		valkey "github.com/valkey-io/valkey-go"
//
//		"github.com/golib/lease/lease"
//		leasevalkey "github.com/golib/lease/backends/valkey"
//	)
//
//	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
//	...
//	store, err := leasevalkey.New(client, leasevalkey.Options{})
//	...
//	leases, err := lease.NewClient(store, lease.ClientOptions{Owner: "billing-worker/" + hostname})
//
// The Store never closes the client.
//
// # One round trip per operation
//
// Acquire, Renew, Release, HandOff and Inspect are each one Lua script, run with
// EVALSHA (falling back to EVAL once after a server restart or failover
// forgot the script), and so are the operations of semaphores and sets
// (AcquirePermit, AcquireSet, RenewSet, ReleaseSet). The scripts are
// loaded so that the server computes their hash. Mutating scripts are
// never retried by valkey-go: a transport retry could run a script that
// was already applied, and only lease.Client knows when a retry is safe.
//
// # Server-side expiry
//
// Only the server's clock decides when a lease has expired: the scripts
// read it with TIME and the client never sends a timestamp. A TTL is kept in
// whole milliseconds, rounded up.
//
// # Keys
//
// Each lease key has one Valkey hash, its record, named
//
//	<Prefix>{<escaped key>}
//
// where the escaped key is the lease key with '%', '{', '}' and '/'
// replaced by %25, %7B, %7D and %2F: the record of "billing/nightly" is
// lease:{billing%2Fnightly}. Two kinds of keys are recorded apart, so that
// one script may take several of them on a cluster:
//
//	<Prefix>{<t>}:<escaped key>        a key holding a hash tag {t}
//	<Prefix>{<escaped sem>}:permit:<n> permit n of semaphore sem, sem/permit/n
//
// A key holds a hash tag by the server's own rule: the bytes between its
// first '{' and the first '}' after it, if there are any. Its record is
// then in the hash slot of the key itself: the records of "{acct}/17" and
// "{acct}/42" are lease:{acct}:%7Bacct%7D%2F17 and
// lease:{acct}:%7Bacct%7D%2F42, in the slot of the application's own keys
// tagged {acct}. The permits of a semaphore (lease.PermitKey: the
// semaphore's key, "/permit/" and the slot in decimal) share the slot of
// the semaphore's escaped key, or of its hash tag if it holds one. Every
// Valkey name of this module is built by one encoding (the module's
// internal/keyspace), so no two things share a name: the prefix holds no
// brace and no tag a '}', so the first {…} of a record's name is its hash
// tag; the escaped key holds no brace, and no lease key can name another
// key's record or move it to another slot. Store.HashTag gives a key's
// tag, Store.RecordKey its record.
//
// The shard channel <record>:released, on which Release, ForceRelease and
// HandOff announce that the key is free (the token in decimal), and
// Acquire a grant to a new acquisition ("acquired") or a newly preferred
// candidate ("preferred"), lives in the record's slot. The record holds
// the fields token (the last token issued), owner, nonce (the holder's
// secret), expires (microseconds since the Unix epoch on the server's
// clock; 0 once released, -1 once force-released, -2 once handed off),
// offer and offer_until (a hand-off's candidates, one a line, and the end
// of its window, in microseconds; meaningful while expires is -2), pref
// and pref_until (the preferred candidate and the end of its preference),
// and the history that
// Inspect and List return as lease.Record's AcquiredAt, RenewedAt and
// Transitions: acquired and renewed (microseconds, set by the scripts
// that grant and extend leases) and transitions (the grants after the
// first). A record takes about 230 bytes plus the key and owner strings
// (MEMORY USAGE, Valkey 8).
//
// # Hand-off, preferred candidates and change watches
//
// Store implements lease.HandOffer and lease.ChangeWatcher. HandOff is one
// script (lua/handoff.lua): if the acquisition is current, the record
// takes a new token and the offer, keeps the old holder's owner and nonce
// (its Renew and Release then get lease.HandedOff), and is given the
// window plus the retention as its TTL, so that an offer nobody took ends
// like a released lease; the hand-off is announced as a release is, and a
// candidate's waiting Acquire is woken at once. While the offer stands
// Acquire grants the key to a candidate only, with the offered token;
// after the window anyone gets the next token. ForceRelease ends a
// standing offer. A permit's key cannot be handed off.
//
// An Acquire with AcquireRequest.Preferred that finds the key held records
// its owner as the preferred candidate for its TTL, in the same script,
// announcing it to change watchers when the preferred owner is new; a
// grant to that owner clears it. Inspect and List report Record.Ending,
// Candidates and Preferred.
//
// WatchChanges shares the subscription of WatchReleases: one SSUBSCRIBE
// per key and Store, whatever the mix of watches. Release waiters are
// woken by what frees the key; change watchers by every announcement, and
// both each time the subscription is confirmed. Grants publish whether
// anyone listens or not: about a microsecond of server time when nobody
// does. So a user needs the &channels part of the ACL rule below to
// acquire, not only to release.
//
// # Semaphores and sets
//
// Store implements lease.PermitAcquirer and lease.SetAcquirer. A permit
// of a semaphore and a key of a set are ordinary leases, recorded as
// above: Renew, Release, Inspect, List, ForceRelease, Sweep and
// WatchReleases serve them unchanged. A set is refused a key under a
// hand-off's standing offer; the permits of a semaphore honour no offer,
// which is why a permit's key cannot be handed off.
//
// AcquirePermit reads the records of every permit below the number of
// permits, in one script, and grants the lowest free one; its token is
// above the last token of every permit of the semaphore, also of those
// beyond a number of permits that was lowered since: the semaphore keeps
// the highest token AcquirePermit issued to its permits in a token key,
// the hash <Prefix>{<escaped sem>}/permits (<Prefix>{<t>}:<escaped
// sem>/permits for a semaphore holding the hash tag {t}), in the permits'
// slot, which ends a retention after the semaphore's last grant.
//
// AcquireSet takes every key of a set, or none, in one script, with one
// token above the last token of each key. On a cluster the records of a
// set must share a hash slot: give the keys of a set one hash tag, as in
// "{acct}/17" and "{acct}/42"; a set across slots is refused before any
// I/O with an error matching lease.ErrInvalidKey. A standalone or
// sentinel server takes any set.
//
// Upgrading from a version without these layouts, the record of a key
// holding a hash tag, or of a permit's key (whatever the key's name, once
// it ends in "/permit/" and a number), moves to its new name: the new
// version does not see the leases such keys hold under the old one. Do
// not run the old and the new version side by side while such keys are
// held; the records of other keys keep their names.
//
// # Retention
//
// A record outlives its lease by a retention (Options.Retention, default
// lease.DefaultRetention, 24 hours), so that the last token and holder are
// kept across releases and expiries for that long; Inspect reports them
// for a free key. While the lease is held the record has no TTL. Release
// and ForceRelease give it the retention as its TTL, and HandOff the
// offer's window plus the retention, in the script that ends the lease,
// so it ends by itself; Acquire removes that TTL (PERSIST)
// when it grants the lease again. The record of a lease that expired
// without a release, because its holder died, has no TTL: Store.Sweep
// removes it once the retention has passed since the lease's expiry
// (lease.Client sweeps in the background; see lease.Sweeper). With
// lease.KeepForever records are never removed.
//
// A removed record costs the key nothing but its history: the next token
// is the server's clock in microseconds, above every token issued more
// than a retention ago (see Tokens). Under a volatile-* maxmemory policy
// the server may evict an ended lease's record, which carries a TTL,
// before its retention is over: for that key the margin against a
// backward step of the clock shrinks to the time since its lease ended,
// as for a lost record. A held lease's record has no TTL, so no
// volatile-* policy evicts it.
//
// # Tokens
//
// A token is max(last token + 1, server time in microseconds), so tokens of
// a key keep rising even when the record is lost (a restart without
// persistence, a failover to a replica that missed writes) or removed after
// its retention, as long as the server's clock does not step back by more
// than the time since the last token was issued: for a record removed
// after its retention, at least the retention. They stay below 2^53 until
// the year 2255.
//
// # Guards
//
// Store.Guard returns the coordinates of an acquisition for writes that must
// happen only while it is current. Such a write, run as a Lua script in the
// record's hash slot (its keys carry the same {…} hash tag as
// guard.Guard.Record, which Store.HashTag returns), is allowed if HMGET
// record token owner expires
// returns the guard's token and owner and an expiry later than TIME in
// microseconds. It must never read the nonce field.
//
// # Errors
//
// Errors from the server (a missing ACL permission, a replica that is read
// only, a cluster that is down) mean the operation was not applied, and say
// so. Those no retry cures (WRONGPASS or NOAUTH after a password change, a
// missing ACL permission, a record of another type under the prefix, an
// unknown command) match lease.ErrMisconfigured, so Client.Acquire returns
// them at once instead of waiting. A transport error or a context that ended after the request may have
// been written is reported as lease.Indeterminate; a connection that could
// not be opened is not. Errors never contain a holder's nonce.
//
// # Server settings
//
// Call Store.Check at start-up: it reports an eviction policy that can
// evict keys without a TTL (allkeys-*, which could evict a held lease's
// record; noeviction and the volatile-* policies cannot, since a held
// lease's record has no TTL: under volatile-* only the records of ended
// leases, within their retention, can be evicted, which only ends their
// retention early), a server older than Redis 7.0, and a user that may not
// run the scripts or publish on the release channels (the &channels part
// of the ACL rule below). Persistence (appendonly yes
// with appendfsync everysec or always) keeps leases across restarts;
// without it a restart frees every lease at once, and tokens still never
// go back. Store.Diagnose advises of a node with appendonly no (read from
// INFO, so the user needs no CONFIG).
//
// ACL rules apply to the commands inside scripts too. The least a user
// needs to do everything the Store does but List and Sweep, on the
// default prefix:
//
//	ACL SETUSER leases reset on >secret ~lease:* &lease:* +client|tracking +evalsha +evalsha_ro +eval +eval_ro +script|load +hmget +hset +persist +pexpire +time +spublish +ssubscribe +sunsubscribe +info
//
// that is: the keys and shard channels of the prefix (~lease:* and
// &lease:* follow Options.Prefix); the scripts, run with EVALSHA (EVAL
// after the server forgot them), read-only ones with EVALSHA_RO, loaded
// with SCRIPT LOAD; the commands inside them (HMGET, HSET, PERSIST,
// PEXPIRE, TIME, SPUBLISH); SSUBSCRIBE and SUNSUBSCRIBE for release watches; INFO for
// Check; and CLIENT TRACKING, which valkey-go sends on connecting unless
// ClientOption.DisableCache is set. On a Valkey Cluster add
// +cluster|shards (valkey-go reads the topology with it) and create the
// user on every node. The rule grants no KEYS, SCAN, FLUSHALL, FLUSHDB,
// SWAPDB, SCRIPT FLUSH, CONFIG, DEBUG or ACL, and no key or channel
// outside the prefix: a test runs every operation as this user and
// checks that those are refused. Such a user can still forge lease
// records under the prefix: keep it to the services that take leases.
//
// Store.List, which the leasectl command's list uses, also needs +scan
// and +role (to tell primaries from replicas), and Store.Sweep needs
// +scan +role +del. SCAN shows the names of all keys on the server,
// whatever the user's key patterns: give those to an operator's user, and
// to the services' only where they have the server to themselves.
// Store.ForceRelease needs nothing beyond the rule above.
//
// A lease.Client sweeps its Store in the background (see
// lease.ClientOptions.SweepEvery), as the services' user: with the rule
// above alone, that sweep is refused at its first command (ROLE) and
// changes nothing. Released records still end by themselves; only the
// records of leases that expired without a release (crashed holders) then
// stay, until a user with +scan +role +del sweeps (lease.Client.Sweep, or
// the leasectl command's gc verb). Set SweepEvery negative where the
// services' sweep would only be refused.
//
// ACL credentials and TLS are options of the valkey-go client
// (ClientOption.Username, Password and TLSConfig); see
// docs/valkey-quickstart.md.
package valkey
