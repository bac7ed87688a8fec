// Command leasectl shows and repairs the leases of github.com/golib/lease
// on Valkey or PostgreSQL, for operators.
//
// Install it with
//
//	go install github.com/golib/lease/cmd/leasectl@latest
//
// # Usage
//
//	leasectl [connection flags] command [flags] [arguments]
//
// Commands:
//
//	list [--prefix P] [--held] [--limit N] [--cursor C]
//	                     keys with their holder, token, remaining time and
//	                     state, when each was acquired and last renewed,
//	                     and how many times its holder changed (as kubectl
//	                     get lease shows acquireTime, renewTime and
//	                     leaseTransitions)
//	inspect KEY          one key
//	watch KEY [--interval D]
//	                     follow one key (acquisitions, releases, expiries)
//	                     until interrupted (Ctrl-C ends it with status 0)
//	release --force --yes [--token T] KEY
//	                     expire the lease on KEY now, keeping its token
//	fence show RESOURCE  a resource's fence, and the lease it is fenced by
//	gc [--dry-run]       remove the records past their retention (lease
//	                     records, and the fences of the fence flags), as
//	                     the services' clients do every hour; --dry-run
//	                     lists them and removes nothing
//	check                the backend's Check: problems and advice; on
//	                     PostgreSQL also the fences table's and, where
//	                     they exist, the leasequeue tables'
//	migrate [--dry-run | --status] [--only lease,fence,queue]
//	                     PostgreSQL: create or upgrade the lease table, the
//	                     fences table and the leasequeue tables (their
//	                     packages' Migrate functions, safe while services
//	                     run); --dry-run lists the pending migrations and
//	                     applies nothing, --status lists every migration
//	                     and exits 3 if one is pending; --only names the
//	                     table sets. An UNLOGGED lease table stays so
//
// Connection flags may come before the command or among its flags:
//
//	--valkey URL|ADDR[,ADDR…]   a Valkey server, cluster or sentinel; a
//	                            valkey:// redis:// rediss:// or unix:// URL
//	                            (valkey-go's ParseURL), or addresses.
//	                            Default $VALKEY_URL, then $REDIS_URL. A
//	                            password missing from the URL is taken from
//	                            $VALKEYCLI_AUTH or $REDISCLI_AUTH.
//	--valkey-prefix P           the Store's Options.Prefix (default "lease:")
//	--fence-prefix P            the fence's ValkeyOptions.Prefix (default "fence:")
//	--postgres DSN              a PostgreSQL URL or keyword/value string.
//	                            Default $DATABASE_URL; what it leaves out
//	                            comes from the PG* variables (PGHOST,
//	                            PGUSER, PGPASSWORD, PGSERVICE, …), as pgx
//	                            reads them.
//	--schema S, --table T       the lease table (default public.leases)
//	--fence-schema S, --fence-table T
//	                            the fences table (default public.lease_fences)
//	--queue-schema S, --queue-table T
//	                            the leasequeue tables (default
//	                            public.leasequeue_jobs and its _members)
//	--disable-notify            the application sets Options.DisableNotify
//	                            (check then judges a pooler accordingly)
//	--backend valkey|postgres   which one, when both are configured
//	--timeout D                 bound on each operation (default 10s)
//	--retention D               the stores' Options.Retention, which gc
//	                            sweeps by: give the services' value (default
//	                            24h, lease.DefaultRetention). A shorter one
//	                            removes records sooner than the services
//	                            would, which only shortens how far back the
//	                            store's clock may step without harm
//	--json                      JSON instead of tables (watch: one object a line)
//
// leasectl never prints a connection string or a password: an error about
// one says which setting failed to parse, not its value. An error reaching
// a server names its address.
//
// # PgBouncer
//
// leasectl runs its PostgreSQL statements in pgx's exec mode (the unnamed
// statement, no named prepared statements), so it works through a
// connection pooler in transaction mode, PgBouncer's included, whatever
// the services' statements left on the pooler's sessions. A
// default_query_exec_mode in the connection string overrides it. Pass
// --disable-notify when the services set Options.DisableNotify, as they
// must behind such a pooler without a ListenPool, so that check judges
// the pooler as they use it.
//
// # Exit status
//
//	0  done
//	1  an error: the backend could not be reached, refused, or failed
//	2  usage: an unknown command or flag, a missing argument, an invalid
//	   key, or release without --force or --yes
//	3  the answer is "no": inspect of a key with no record, fence show of
//	   a resource with no fence, release that found nothing to release
//	   (or another holder than --token), check that found problems, gc
//	   while another process sweeps, migrate --status with a migration
//	   pending
//
// # Forced release
//
// release --force ends the current acquisition as if its holder had
// released it: the key is free at once, waiters wake, and the key keeps
// its token, so the next holder's token is higher and every fence refuses
// the old holder's writes from the moment the new holder writes. The old
// holder is not stopped: it learns of the loss at its next renewal. Force
// a release only for keys whose protected writes are fenced. --token T
// releases only the acquisition with token T, so that a holder that
// changed since you looked is left alone.
//
// # Why the standard flag package
//
// leasectl parses its arguments with the standard library's flag package,
// not cobra or kong: it has six commands and about twenty flags, which flag
// handles with a FlagSet per command, and the lease module's dependency
// set stays as it is (cobra and kong would enter every user's go.sum).
// The price is small: leasectl lets flags follow arguments itself, and
// writes its own usage text.
package main
