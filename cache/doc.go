// Package cache keeps reconstructible values (a rendered page, an
// aggregate, a token from an upstream API) in Valkey, refreshed by exactly
// one process at a time and published only while that refresh is still
// legitimate. Import valkey-go as valkey and the lease backend as
// leasevalkey:
//
//	store, err := leasevalkey.New(client, leasevalkey.Options{})
//	...
//	leases, err := lease.NewClient(store, lease.ClientOptions{Owner: "web/" + hostname})
//	...
//	pages, err := cache.New(client, leases, cache.Options{TTL: time.Minute})
//	...
//	page, info, err := pages.Get(ctx, "page:/home", func(ctx context.Context, token lease.Token) ([]byte, error) {
//		return render(ctx, "/home")
//	})
//
// After the source changes, call Invalidate(ctx, key).
//
// # Guarded publication
//
// Each entry has a refresh lease, an ordinary lease of the Cache's lease
// client on the key Prefix + cache key. Publish writes a value in one Lua
// script, in one round trip, only if at that instant
//
//   - the lease record still shows the publishing acquisition (its token
//     and owner, not expired on the server's clock), and
//   - the entry has not been invalidated since that acquisition began.
//
// Otherwise nothing changes, and the error says which check failed: a
// *guard.NotCurrentError (guard.ErrNotCurrent) for the lease, an
// *InvalidatedError (ErrInvalidated) for the invalidation. So a refresher
// that was paused (a GC pause, a frozen VM) past its lease cannot overwrite
// the value of the one that took over, and a refresher that read the
// source before a change cannot publish what it read after Invalidate
// returned.
//
// # Invalidation
//
// The lease token is the entry's generation. Every acquisition of a
// refresh lease gets a token greater than all before it, so Invalidate
// records the last token issued as the entry's invalidation mark (in the
// same script that deletes the value) and Publish refuses every token up
// to the mark: exactly the refreshes whose lease was acquired before
// Invalidate ran. A refresh that acquires the lease afterwards reads the
// source afterwards, and publishes. Commit the change to the source first,
// then call Invalidate. The mark only goes up, until it is deleted once
// redundant (see Footprint); a Get that is loading when its entry is
// invalidated loads again.
//
// # One refresher across processes
//
// Get is a singleflight.Do whose group is every process sharing the
// servers. golang.org/x/sync/singleflight deduplicates the calls of one
// process only: with N replicas a miss still loads N times, and nothing
// checks, when a value is stored, that it is still wanted. Here a hit is
// one round trip (a GET, or an MGET with StaleFor); on a miss, the Gets of a process share one
// attempt at the refresh lease; the process that gets it runs the load
// function and publishes, and every other process waits, woken by a shard
// pub/sub message that the publication sends (and by the lease's release,
// or its expiry if the refresher died), or returns the stale value at once
// if Options.StaleFor keeps one. A load that fails, panics or loses its
// lease publishes nothing and releases the lease, so the next Get
// refreshes.
//
// # Keys
//
// The refresh lease's record is, in the Valkey lease backend's layout,
// <store prefix>{<escaped lease key>}. The entry's keys and channel reuse
// that hash tag (the one the Store's HashTag method returns) after the
// Cache's Prefix:
//
//	<Prefix>{<escaped lease key>}:value        header, then the value
//	<Prefix>{<escaped lease key>}:fresh        the publishing token (StaleFor only)
//	<Prefix>{<escaped lease key>}:invalidated  the invalidation mark, until redundant
//	<Prefix>{<escaped lease key>}:published    shard channel announcing publications
//
// With the default prefixes the entry "page:/home" has the record
// lease:{cache:page:%2Fhome} and the value cache:{cache:page:%2Fhome}:value
// (in a hash tag '%', '{', '}' and '/' are written as %25, %7B, %7D and
// %2F). In general the entry's names are the record's name after the
// Store's prefix, after the Cache's Prefix: a cache key that holds a hash
// tag {t} has its record in t's slot, lease:{t}:<escaped lease key>, and
// its value at <Prefix>{t}:<escaped lease key>:value (the key
// "report/{2026}" has the value cache:{2026}:cache:report%2F%7B2026%7D:value),
// in the slot of the application's own keys tagged {t}.
// Because record, value, marker and mark share one hash slot, both scripts
// are atomic on a Valkey Cluster too, and a Get reads one node.
//
// The value key holds a header, the letter F or S and the publishing
// token in decimal up to a newline, then the value. An F value is fresh as
// long as it exists: it expires after TTL, and a hit is one GET. A Cache
// with StaleFor publishes S values, kept TTL + StaleFor and fresh while
// the :fresh marker, which expires after TTL, holds their token; it reads
// both keys with one MGET. Every Cache reads both kinds, so replicas with
// different StaleFor can share entries, and one without StaleFor never
// returns a value past its TTL. A value is written and read whole,
// whatever its size.
//
// # Footprint
//
// Values and freshness markers expire; lease records end after the lease
// Store's retention (see the lease backend). The invalidation mark (about
// 60 bytes plus the key) has no TTL, so that no volatile-* maxmemory
// policy evicts it, and ends once it is redundant: once no acquisition of
// the refresh lease with a token up to the mark can pass Publish's lease
// check again. Publish deletes it when a later acquisition publishes. A
// Sweeper deletes the marks of entries invalidated and not refreshed
// since: those whose lease record is gone, shows a later token, or shows
// the acquisition up to the mark released, force-released, or expired
// more than the Store's Retention ago (that margin keeps the mark across a
// backward step of the server's clock, which alone could make an expired
// acquisition current again). A mark whose acquisition is still current
// stays: it is what refuses that acquisition's publication.
//
// Give the Sweeper (NewSweeper; the Cache needs its lease client first,
// so it cannot be given itself) to the lease client in
// lease.ClientOptions.Sweepers, and the client sweeps the marks with its
// Store, in the background, under its sweep lease; Cache.Sweep and
// Sweeper.Sweep sweep on demand. The user that sweeps needs the grants
// below.
//
// # Server settings
//
// Entries live on the servers of the lease Store, which wants
// maxmemory-policy noeviction: size maxmemory for the values (their TTL
// bounds how long they stay). When the server is out of memory, Publish
// fails and writes nothing, while Invalidate still works.
//
// ACL rules apply to the commands inside scripts too. The least a user
// needs to do everything the Cache and its lease Store do, on the default
// prefixes (SECURITY.md explains each grant, and what a cluster needs):
//
//	ACL SETUSER web reset on >secret ~lease:* &lease:* ~cache:* &cache:* +client|tracking +evalsha +evalsha_ro +eval +eval_ro +script|load +hmget +hget +hset +persist +pexpire +get +mget +set +unlink +time +spublish +ssubscribe +sunsubscribe +info
//
// Sweeping the invalidation marks needs +scan +role besides (to walk the
// keys of every primary; the sweep script needs only the commands above);
// a lease client that sweeps them with its Store needs +del too for the
// Store's own sweep (without it that part fails and the marks are swept
// all the same).
// SCAN lists the names of every key on the server, whatever the user's
// key patterns: give those grants to an operator's user, or to the
// services' only where they have the server to themselves. Without them
// the marks of entries not refreshed since their invalidation stay until
// such a user sweeps.
//
// # Errors
//
// Errors start with "cache: " and name the operation and the cache key.
// Besides the typed errors above, Get returns a *PanicError for a load that
// panicked, and an error matching ErrWaitTimeout when another process's
// refresh took longer than Options.Wait. An error matching
// lease.ErrIndeterminate from Publish or Invalidate means the request may
// or may not have been applied.
package cache
