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
//	leasectl COMMAND --help     (or leasectl help COMMAND)
//	leasectl --version          the module version, "(devel)" when unknown
//
// Commands:
//
//	list [--prefix P] [--held] [--limit N [--cursor C]]
//	                     keys with their holder, token, remaining time and
//	                     state, when each was acquired and last renewed,
//	                     and how many times its holder changed (as kubectl
//	                     get lease shows acquireTime, renewTime and
//	                     leaseTransitions); --limit N prints at most N, and
//	                     the cursor that continues the listing; permits
//	                     with their SEMAPHORE and SLOT, keys of sets with
//	                     their SET (see "Semaphores and sets"); how a free
//	                     key's last lease ended, a hand-off's offer and a
//	                     preferred candidate (see "Hand-off")
//	inspect [--permits N] KEY
//	                     one key; with --permits N, each permit 0 to N-1
//	                     of the semaphore KEY, and how many are held
//	watch [--interval D] KEY
//	                     follow one key until interrupted (with
//	                     lease.Client.Observe): held, offered or free,
//	                     then acquired, released, expired, force-released,
//	                     handed-off, preferred; lost when the record is
//	                     gone (lost data, or removed after its retention);
//	                     token-down when a token lower than one seen
//	                     before appears. Changes are seen at once where
//	                     the backend announces them, at most --interval
//	                     (default 250ms) late where it does not
//	release --force [--yes] [--token T] KEY
//	                     expire the lease on KEY now, keeping its token;
//	                     without --yes a dry run that changes nothing;
//	                     KEY may be one permit, SEM/permit/SLOT
//	fence show [--lease KEY] RESOURCE
//	                     a resource's fence, and the lease it is fenced by;
//	                     --lease names that lease for a missing fence
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
//	run [--ttl D] [--owner O] [--wait D | --try] [--kill-after D] KEY -- COMMAND [ARGS...]
//	                     run COMMAND while holding the lease on KEY (see
//	                     "Running a command under a lease")
//
// Each command's help gives its flags with their defaults and its exit
// statuses.
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
//	--fence-prefix P            the fence's Options.Prefix (default "fence:")
//	--postgres DSN              a PostgreSQL URL or keyword/value string.
//	                            Default $DATABASE_URL; what it leaves out
//	                            comes from the PG* variables (PGHOST,
//	                            PGUSER, PGPASSWORD, PGSERVICE, …), as pgx
//	                            reads them.
//	--schema S, --table T       the lease table (default public.leases)
//	--fence-schema S, --fence-table T
//	                            the fences table (default public.lease_fences)
//	--fence-valkey URL|ADDR     read the fences (fence show, gc) from this
//	--fence-postgres DSN        Valkey or PostgreSQL, not from the lease's
//	                            store: a lease in Valkey may fence rows in
//	                            PostgreSQL, and the other way round
//	--queue-schema S, --queue-table T
//	                            the leasequeue tables (default
//	                            public.leasequeue_jobs and its _members)
//	--disable-notify            the application sets Options.DisableNotify
//	                            (check then judges a pooler accordingly)
//	--backend valkey|postgres   which one, when both are configured
//	--timeout D                 bound on connecting (valkey-go's dial
//	                            timeout, PostgreSQL's first ping) and on
//	                            each operation (default 10s)
//	--retention D               the stores' Options.Retention, which gc
//	                            sweeps by: give the services' value (default
//	                            24h, lease.DefaultRetention). A shorter one
//	                            removes records sooner than the services
//	                            would, which only shortens how far back the
//	                            store's clock may step without harm
//	--json                      JSON instead of tables (watch: one object a
//	                            line), errors included (below)
//
// leasectl never prints a connection string or a password: an error about
// one says which setting failed to parse, not its value. The grants each
// command needs (Valkey ACL rules, PostgreSQL privileges) are in the
// runbook, docs/operations.md; a refused command points there. An error
// reaching a server names its address.
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
//	1  an error: the backend could not be reached or did not answer
//	   within --timeout, refused, or failed; watch whose first read
//	   failed (a bad start)
//	2  usage: an unknown command or flag, a missing argument, an invalid
//	   key, release without --force
//	3  the answer is "no": inspect of a key with no record (with --permits:
//	   of a semaphore none of whose permits has one), fence show of
//	   a resource with no fence, release (or its dry run) that found
//	   nothing to release or another holder than --token, check that
//	   found problems, gc while another process sweeps, migrate --status
//	   with a migration pending
//
// # JSON
//
// With --json, stdout holds one JSON document (watch: one object a line):
// the command's answer, also for a "no" that has one (inspect of a key
// without a record, check with problems, release that changed nothing).
// When a command fails before it has an answer, stdout holds an error
// object instead, and stderr the same message as text:
//
//	{"error": "…", "kind": "usage", "exit": 2}
//
// kind is "usage" (exit 2), "error" (exit 1), "indeterminate" (exit 1,
// the outcome of a change is unknown, as after a timeout mid-release) or
// "negative" (exit 3).
//
// Each object of watch has "time", "event" (held, offered or free first;
// then acquired, released, expired, force_released, handed_off,
// preferred, lost, token_down; or error, with "error"), the key's record
// as inspect prints it, and "previous", the record before the change.
// Text spells the events with a hyphen (force-released, handed-off,
// token-down), so that each line's second field is one word.
//
// # Data loss
//
// A record that disappears is not a release: watch prints "lost" (the
// backend lost data: a Valkey restart without persistence, a failover, an
// eviction; or the record was removed after its retention), and
// "token-down" when a key's token is lower than one seen before (a
// restored backup, a clock that stepped back), since fences refuse the
// writes of that holder. fence show of a resource without a fence cannot
// tell an untouched resource from an evicted fence key by itself: --lease
// KEY compares it with the lease it is fenced by.
//
// run exits with its own statuses, listed below.
//
// # Running a command under a lease
//
// leasectl run is a command-line lock, as consul lock is. It acquires the
// lease on KEY (waiting until it is free; --wait D gives up after D,
// --try at once), starts COMMAND, renews the lease every TTL/3 while it
// runs (--ttl, default 15s), releases the lease when it exits, and exits
// with its status. The command starts after "--", or at the first
// argument after KEY; its own flags are never read by leasectl. The owner
// other holders see is --owner, by default hostname/pid.
//
// The command's environment is leasectl's, plus LEASE_KEY, LEASE_TOKEN
// (the fencing token, in decimal) and LEASE_OWNER: the fields of the
// acquisition's lease.Snapshot that a fenced write needs. Pass the token
// to every write the lease protects (docs/operations.md shows a shell
// script that does so with psql): the lease alone does not stop a command
// that runs on after a loss.
//
// When a renewal finds the lease lost (force-released, expired, taken by
// another, or its local deadline passed), run sends SIGTERM to the
// command's process group, SIGKILL --kill-after later (default 10s) if any
// of it still runs, and exits 123. SIGINT, SIGTERM and SIGHUP sent to
// leasectl are passed on to the command's process group, and the lease is
// held until the command has exited.
//
// The command runs in a process group of its own (Setpgid), so that
// signals reach every process it starts; it is not the terminal's
// foreground group, so it cannot read from the terminal. On Linux the
// command gets SIGTERM if leasectl dies without stopping it (Pdeathsig);
// on other Unix systems it then runs on without the lease. On Windows,
// which has neither process groups nor SIGTERM, a lost lease kills the
// command at once.
//
// Exit status of run, after timeout(1) and env(1):
//
//	N    the command's status (128+N if signal N killed it)
//	123  the lease was lost while the command ran; the command was
//	     stopped if it still ran
//	124  the lease is held by someone else (--try, or --wait ran out);
//	     the command did not run
//	125  leasectl's own error, usage errors among run's arguments
//	     included; the command did not run
//	126  the command could not be started
//	127  the command was not found
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
// # Hand-off
//
// A holder may hand its lease off to candidates (lease.Handle.HandOff):
// its acquisition ends, and the key is offered to the candidates with a
// new, higher token for a window, during which only they can acquire it.
// list and inspect show such a key with STATE "offered", OWNER the owner
// who handed it off, TOKEN the token the first candidate to acquire gets,
// REMAINING what is left of the window, and a CANDIDATES column (comma
// separated); a PREFERRED column names an owner waiting for a held key as
// its preferred candidate (lease.ClientOptions.Preferred); an ENDED column
// says how a free key's last lease ended (released, expired,
// force-released, handed-off). The columns appear when a record needs
// them, so a backend that records none of it keeps the plain table. With
// --json, records carry "ended", "candidates", "offered_by" and
// "preferred", and state "offered". watch prints "handed-off" with the
// candidates and the offered token, "acquired" when a candidate takes
// it, "expired" when the window passes with none taking it, and
// "preferred" with the preferred owner. release --force of an offered
// key ends the offer; the key is then free for anyone and keeps its token.
//
// # Semaphores and sets
//
// A semaphore and a set of keys (lease.Client.AcquirePermit and
// AcquireSet) have no record of their own: each permit is the lease on its
// permit key, SEM/permit/SLOT (lease.PermitKey), and each key of a set a
// lease held by the set's acquisition with the set's one token. So every
// command sees them as leases, and:
//
//   - inspect --permits N SEM inspects the permits 0 to N-1 of the
//     semaphore SEM, one read each, and prints each slot's record and
//     "2 of 3 permits of semaphore "exports" held"; exit status 3 if none
//     has a record. N is the services' number: the semaphore does not
//     store it, and permits at N and above are not read (list --prefix
//     'SEM/permit/' shows every slot).
//   - list, and inspect of a permit's key, add SEMAPHORE and SLOT columns
//     for permits; list adds a SET column (set1, set2, …) for held keys
//     that share one owner and one token, as the keys of a set do. That
//     is inferred: records never name the acquisition that holds them, so
//     two leases one owner took apart that got the same token would read
//     as a set too, and a listing in pages sees a set that spans pages in
//     part. With --json, records carry "semaphore" and "slot", or "set",
//     and list's answer a "sets" array of {"set", "owner", "token", "keys"}.
//   - release --force SEM/permit/SLOT frees that one permit, and says
//     which slot of which semaphore it is. release --force of one key of a
//     set ends the set for its holder at its next renewal; its other keys
//     stay held until it releases them or their TTL passes.
//
// # Why the standard flag package
//
// leasectl parses its arguments with the standard library's flag package,
// not cobra or kong: it has a few commands and about twenty flags, which
// flag handles with a FlagSet per command, and the lease module's
// dependency set stays as it is (cobra and kong would enter every user's
// go.sum). The price is small: leasectl lets flags follow arguments
// itself, and writes its help from one table of commands (verbs.go),
// where adding a command is one entry.
package main
