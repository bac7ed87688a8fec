// Package postgres is a lease.Backend on a PostgreSQL table, built on
// pgx v5. Import it as leasepostgres:
//
//	import leasepostgres "github.com/golib/lease/backends/postgres"
//
//	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil { ... }
//	store, err := leasepostgres.New(pool, leasepostgres.Options{})
//	...
//	defer store.Close()
//	client, err := lease.NewClient(store, lease.ClientOptions{Owner: "billing-worker/" + hostname})
//
// New takes the application's own *pgxpool.Pool (or a *pgx.Conn, or a
// pgx.Tx) and never closes it.
//
// # The table
//
// Leases live in one table, public.leases by default (Options.Schema and
// Options.Table choose another; names are always quoted, so any name is
// safe). It has one row per key that was acquired, until a sweep removes
// it a retention after its lease ended (see Retention below):
//
//	key text PRIMARY KEY, owner text, nonce text, token bigint, expires_at timestamptz,
//	watched_until timestamptz
//
// Beside the table, migration 005 creates four functions named after it
// (public.leases_permit, leases_setacquire, leases_setrenew and
// leases_setrelease by default), which the semaphore and set statements
// call, and a partial index on the permit keys (leases_permits).
//
// Release sets expires_at to a thousand years before the release, and
// ForceRelease to two thousand years before it: long past, so a backward
// step of the database's clock cannot bring an ended lease back, and
// still telling when the lease ended.
//
// Migration 006 adds the columns of a hand-off and a preferred candidate
// (candidates, preferred, preferred_until, preferred_at; no index, so
// updates stay HOT) and makes the two grant functions of 005 clear a
// hand-off's candidates.
//
// # Retention
//
// A row stays for Options.Retention (lease.DefaultRetention, a day, by
// default) after its lease ended: was released, expired, or was
// force-released. Until then Inspect and List show the key's last token.
// Store.Sweep removes the rows past their retention, one page of the
// table per statement, and a lease.Client calls it in the background
// (see lease.ClientOptions.SweepEvery), so the table holds the keys in
// use rather than every key ever used. The next acquisition of a removed
// key still gets a greater token, because tokens are seeded from the
// database's clock (below): the removed token was issued at least a
// retention ago, so a backward step of the clock of up to the retention
// cannot bring the next token below it. lease.KeepForever keeps every row.
// Sweeping needs DELETE on the table. A row that an earlier version of
// this package force-released (its expiry is the Unix epoch) does not tell
// when its lease ended, only when it began (its token): it is removed once
// its token is a retention old.
//
// # Migrations
//
// Migrate creates and upgrades the table, safely when several replicas call
// it at the same time (a transaction-scoped advisory lock, and a versions
// table named Table + "_migrations"). Teams that run their own migration
// tool can apply the same versioned files instead: Migrations returns them
// in golang-migrate's layout, GooseMigrations in goose's; both are written
// for the default table public.leases. Operators can run the same
// migrations with leasectl migrate, which also lists them (--status) and
// shows what it would apply (--dry-run). Migrate's own statements use no
// named prepared statement, so it works through PgBouncer in transaction
// mode whatever the pool's exec mode.
//
// Migration 004 adds the columns of a record's history, acquired_at,
// renewed_at and transitions (lease.Record's AcquiredAt, RenewedAt and
// Transitions), which acquire and renew keep in their one statement. They
// have no index, so that those updates stay HOT.
//
// # Errors
//
// An error the server sends is explained by its exact SQLSTATE: a missing
// table, schema or column (run leasectl migrate, or Migrate), a missing
// function (PostgreSQL 12 or newer is needed), a missing privilege (the
// GRANT to run), a refused login, a prepared statement lost to a
// transaction-mode pooler (set default_query_exec_mode=exec). Those match
// lease.ErrMisconfigured, so Client.Acquire returns them at once instead of
// waiting. An error from a pool that could not connect in time names the
// server's host and port.
//
// # Operations
//
// Each lease operation is one SQL statement (the files are in the queries
// directory of this package), so it is atomic without an explicit
// transaction and costs one round trip:
//
//   - Acquire is an INSERT ... ON CONFLICT DO UPDATE that takes the row
//     over only when it has expired, or extends it for the same
//     acquisition (so a retried acquire is idempotent), and otherwise
//     returns the holder, its token and its remaining time;
//   - Renew and Release change the row's expiry only if it still shows
//     the exact acquisition (key, secret nonce, token) and has not
//     expired; when they refuse, they write the row back unchanged and the
//     same statement says whether the acquisition expired or was
//     superseded;
//   - Inspect reads the row;
//   - AcquirePermit (lease.PermitAcquirer) calls leases_permit: permit
//     acquisitions of one semaphore take turns on a transaction-scoped
//     advisory lock, read every permit row of the semaphore (through the
//     partial index, in one range of keys), and extend the caller's own
//     permit (an idempotent retry) or take the lowest free slot with a
//     token above every permit's, trying the next free slot in the same
//     call if another statement took it meanwhile; acquisitions of one
//     semaphore therefore run one after another on the database;
//   - AcquireSet (lease.SetAcquirer) calls leases_setacquire, which locks
//     the keys' rows one at a time in byte order (COLLATE "C"), inserting
//     a row for a key that has none, stops at the first key held by
//     another acquisition and removes the rows it inserted, and otherwise
//     writes every key with one token above all of theirs; RenewSet and
//     ReleaseSet lock the rows in the same order before they write. Any
//     set of keys works, and no two set statements can wait for each
//     other in a cycle: each waits only for a key greater than every key
//     it holds (migrations/005_lease_groups.up.sql gives the argument);
//   - Sweep reads a page of rows in key order and, in the same statement,
//     deletes those whose lease ended a retention ago, skipping rows that
//     another session has locked and keeping any that an acquisition took
//     meanwhile (it runs in a READ COMMITTED transaction of its own).
//
// Expiry is decided by the database's clock, never the client's: "now" is
// statement_timestamp(), the time the statement reached the server, read
// once so that every part of a statement sees the same instant (unlike
// now(), it is not frozen for a whole transaction, so a Store on a pgx.Tx
// works too). A statement that waits for a row lock therefore only ever
// judges a lease as of when it arrived and grants a lease that is shorter
// by the wait, never longer. A TTL is kept in whole microseconds (the
// resolution of an interval), rounded up.
//
// # Tokens
//
// A new token is greatest(previous token + 1, microseconds since 1970 on
// the database's clock), stored as bigint. So tokens of a key always grow,
// also after Sweep removed its row and after the table was lost or
// restored from an older backup, as long as the database's clock does not
// step back by more than the time since the last token was issued (at
// least the retention, for a removed row); and they stay below 2^53 (until
// the year 2255), so they survive JSON and Lua numbers exactly.
//
// # UNLOGGED tables
//
// With Options.Unlogged, Migrate makes the table UNLOGGED: its changes
// skip the write-ahead log, so acquire and release commit without waiting
// for the disk. The
// price: after a crash of the database server (or a failover to a
// replica, which never has the table's rows) the table is empty, so every
// holder is forgotten and another process may acquire a lease whose
// holder still works. Fencing still holds, because the new token is
// seeded from the clock and so is greater than the forgotten one: a fenced
// write of the old holder is rejected. Use it when fencing protects the
// work and an occasional double run after a crash is acceptable.
//
// # Asynchronous commit
//
// Options.AsyncCommit keeps the table logged (it survives a crash and
// reaches replicas) but lets acquire, renew and release commit without
// waiting for the WAL flush: each statement sets synchronous_commit off
// for its own transaction, in the same round trip. On a durable server
// that is most of an operation's latency. The price is smaller than
// Unlogged's and of the same kind: a crash of the database server loses
// the operations acknowledged in its last moments (at most three times
// wal_writer_delay), so a grant or renewal may be undone while its holder
// still works, and fencing keeps the writes apart as above.
//
// # Fast hand-over
//
// The Store implements lease.ReleaseWatcher: a Client.Acquire waiting for
// a key listens (LISTEN, on one connection taken from the pool and shared
// by every waiter of the Store) and tries again as soon as the key is
// released, instead of at its next retry. The release statement calls
// pg_notify itself, but only for a key that a waiter marked (one short
// UPDATE when the wait starts, renewed every minute): NOTIFY makes
// committing transactions queue on a global lock, which releases that
// nobody waits for should not pay. ReleaseSet notifies for each key it
// releases, as Release does for its key, and a permit is watched by its
// permit key. Trying again when the holder's
// remaining time runs out stays the fallback, so a lost notification only
// costs time. Store.Close gives the listener's
// connection back. Options.DisableNotify turns all of this off.
//
// # Hand-off and preferred candidates
//
// The Store implements lease.HandOffer: Store.HandOff ends an acquisition
// and, in the same statement, offers the key to candidates for a window
// on the database's clock, with a new, higher token. The row keeps the
// old holder's owner and nonce, its expiry is the end of the window, and
// candidates names the candidates: while the window runs only a candidate
// is granted the key (with the offered token; anyone else is refused with
// a *lease.NotAcquiredError naming the candidates), and after it anyone
// is (with a higher token). The old holder's Renew and Release are
// answered with Reason lease.HandedOff until someone acquired the key,
// then lease.Superseded; ForceRelease ends a standing offer. Inspect and
// List report the offer (Record.Candidates, Ending lease.EndHandedOff),
// also once it lapsed (Ending, without candidates). The row of a standing
// or lapsed offer is that of an ended lease: Sweep removes it a retention
// after the window passed, as it removes an expired lease's.
//
// An Acquire with lease.AcquireRequest.Preferred runs a variant of the
// acquire statement that, when another acquisition holds the key, also
// records its owner as the key's preferred candidate until its TTL ends
// (Record.Preferred), and clears it when that owner acquires. Plain
// acquires run the statement without it, so they pay nothing for it.
//
// # Change notifications
//
// The Store implements lease.ChangeWatcher on the same listener and the
// same marks as WatchReleases: a grant to a new acquisition and a newly
// recorded preferred candidate notify too, but only for a marked key, as
// a release does, and with a payload (the key after a byte 1) that wakes
// only change watches, so that a grant never wakes a waiting Acquire. A
// release, a hand-off and a forced release wake both. Every change watch
// is also woken once its key is marked, and whenever the listener listens
// again after losing its connection. To mark a key that has no row, the
// mark inserts one that holds nothing (token 0, which Inspect and List do
// not show, and Sweep removes a retention after the mark lapsed), so that
// the key's first grant notifies too.
//
// # Errors
//
// Errors follow lease.Backend: a *pgconn.PgError of severity ERROR means
// the statement failed and was rolled back, so the error is plain (nothing
// was applied); a serialization failure or deadlock says it is safe to
// retry; a missing table or privilege reads as a configuration error. A
// FATAL or PANIC error (the session ended, possibly around the commit), a
// timeout, a cancelled context or a connection lost after the statement
// was sent is lease.ErrIndeterminate: the statement may have committed.
// The severity is read untranslated (SeverityUnlocalized), so the answers
// are the same whatever the server's lc_messages; fence and leasequeue
// classify their statements the same way. Errors never contain the
// acquisition's nonce or the connection string.
//
// A statement that waits for a row lock (for example behind a long guarded
// transaction) is bounded by the Client's OperationTimeout through its
// context. pgx's default reaction to a context that ends mid-statement is
// to close the connection, and the server may still finish the statement:
// hence indeterminate. To have the server cancel it instead, set
// pgconn.Config.BuildContextWatcherHandler to a
// pgconn.CancelRequestContextWatcherHandler.
//
// # Connection poolers
//
// The statements need no session state: no session advisory lock (the
// permit function's advisory lock ends with its transaction), no
// temporary table, no SET. They work through PgBouncer in transaction (or
// statement) mode. With PgBouncer 1.21 or later and max_prepared_statements
// set, keep pgx's default exec mode, which prepares each statement once per
// connection. Otherwise pgx must not rely on named prepared statements
// living on one server connection (default_query_exec_mode=exec in the
// connection string does the same):
//
//	config.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec // or QueryExecModeCacheDescribe, QueryExecModeSimpleProtocol
//
// Every parameter is cast in the SQL, so every exec mode works, but the
// database then plans each statement every time, which costs more than
// running it. LISTEN does need a session: behind a pooler in transaction
// mode, give Options.ListenPool a small pool that connects to PostgreSQL
// directly, or set Options.DisableNotify.
//
// # Checking the setup
//
// Call Store.Check at start-up, after Migrate: it reports a missing or
// outdated table, missing privileges, a standby or read-only session, and
// a pooler in transaction mode while release notifications have no session
// of their own. Store.Diagnose returns the same problems and, apart from
// them, advice (idle_in_transaction_session_timeout, lock_timeout, prepared
// statements behind a pooler). The leasectl command's check runs it.
//
// # Guards
//
// Store.Guard returns the coordinates of an acquisition in this Store's
// table, and CheckGuard checks them inside a transaction with SELECT ...
// FOR SHARE: if the record still shows the acquisition, no other
// acquisition can take the lease until the transaction ends, so writes in
// that transaction happen under the lease.
package postgres
